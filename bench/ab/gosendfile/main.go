// Command gosendfile answers every HTTP/1.1 request on its connection with
// one file, through net.TCPConn.ReadFrom: Go's own sendfile loop, with no
// Caddy and no flash_serve. bench/ab/bigcc.sh sets it beside them to tell
// what a download costs in any Go server from what flash_serve adds.
//
//	gosendfile 127.0.0.1:18082 /path/to/file
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gosendfile ADDRESS FILE")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c, os.Args[2])
	}
}

// serve reads each request's header lines and answers with the whole file.
func serve(c net.Conn, name string) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprint(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		if st, err := f.Stat(); err == nil {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", st.Size())
			_, err = io.Copy(c, f)
		}
		f.Close()
		if err != nil {
			return
		}
	}
}
