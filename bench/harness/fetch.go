//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fetchResult is what one pass of fetchOnce did.
type fetchResult struct {
	Requests int            `json:"requests"`
	Status   map[string]int `json:"status"`
	Errors   int            `json:"errors"`
	Seconds  float64        `json:"seconds"`
}

// fetchOnce requests every path of the file uris exactly once over conns
// keep-alive connections: unlike wrk (a duration) and h2load -i (every
// client walks the whole list), it visits a list of a million paths once.
// It is the harness itself, run again with -fetch, so that bench/run can
// pin it to the load generators' CPU.
func fetchOnce(uris, base string, conns int) (fetchResult, error) {
	raw, err := os.ReadFile(uris)
	if err != nil {
		return fetchResult{}, err
	}
	paths := strings.Fields(string(raw))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
	}}
	var next atomic.Int64
	var mu sync.Mutex
	res := fetchResult{Requests: len(paths), Status: map[string]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := map[string]int{}
			errs := 0
			for {
				i := int(next.Add(1) - 1)
				if i >= len(paths) {
					break
				}
				resp, err := client.Get(base + paths[i])
				if err != nil {
					errs++
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status[strconv.Itoa(resp.StatusCode)]++
			}
			mu.Lock()
			defer mu.Unlock()
			res.Errors += errs
			for k, v := range status {
				res.Status[k] += v
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// runFetch is the -fetch mode: one pass, its result as JSON on stdout.
func runFetch(uris, base string, conns int) {
	res, err := fetchOnce(uris, base, conns)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

// fetchPass runs one -fetch pass pinned to CPU 1 and reads its result.
func fetchPass(cfg *config, uris, base string, conns int) (fetchResult, error) {
	self, err := os.Executable()
	if err != nil {
		return fetchResult{}, err
	}
	out, err := loadgen(2*time.Hour, self, "-fetch", uris, "-fetch-base", base, "-fetch-conns", strconv.Itoa(conns))
	if err != nil {
		return fetchResult{}, err
	}
	var res fetchResult
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &res); err == nil {
			return res, nil
		}
	}
	return res, fmt.Errorf("%s -fetch printed %q", filepath.Base(self), out)
}
