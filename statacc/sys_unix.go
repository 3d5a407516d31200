//go:build unix

package statacc

import "os"

func fileFD(f *os.File) int { return int(f.Fd()) }
