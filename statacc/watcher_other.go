//go:build !linux || flashserve_portable

package statacc

// watcher is inotify's; elsewhere there is none, and every entry is
// revalidated after at most a second (see Options.Revalidate).
type watcher struct{}

func newWatcher(*Cache) *watcher { return nil }

func (w *watcher) add(string) (uint64, bool) { return 0, false }

func (w *watcher) generation(string) uint64 { return 0 }

func (w *watcher) close() {}
