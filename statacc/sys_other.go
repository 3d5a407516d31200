//go:build !unix

package statacc

import "os"

func openFile(path string) (*os.File, error) { return os.Open(path) }

func fileFD(f *os.File) int { return -1 }

func rlimitNoFile() uint64 { return 0 }
