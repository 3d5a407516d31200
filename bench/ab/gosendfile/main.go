// Command gosendfile answers every request on a connection with one whole
// file, 200 and a Content-Length: io.Copy from the *os.File to the
// *net.TCPConn, which is os.File.WriteTo and the standard library's own
// sendfile loop (asking for up to 2 GiB a call), with no Caddy and no
// flash_serve. bench/ab/bigcc.sh sets it beside them, to tell what a
// download costs in any Go server from what flash_serve adds. It reads
// only the request's header lines: no Range, and a body for HEAD too.
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
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go serve(c, os.Args[2])
	}
}

// serve answers each request of c with the file name, until the client
// closes the connection or a write fails.
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
		if err := answer(c, name); err != nil {
			return
		}
	}
}

// answer writes one response: the file, or a 500 and its close if the
// file cannot be opened or read.
func answer(c net.Conn, name string) error {
	f, err := os.Open(name)
	if err != nil {
		fmt.Fprint(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fmt.Fprint(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return err
	}
	if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", st.Size()); err != nil {
		return err
	}
	n, err := io.Copy(c, f)
	if err == nil && n != st.Size() {
		err = io.ErrUnexpectedEOF
	}
	return err
}
