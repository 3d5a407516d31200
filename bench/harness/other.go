//go:build !linux

// Command harness is the side-by-side benchmark behind bench/run. It needs
// Linux: taskset, perf, /proc and the servers it compares.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "the benchmark harness runs on Linux only")
	os.Exit(1)
}
