//go:build !linux || flashserve_portable

package statacc

import (
	"context"
	"sync/atomic"
	"time"
)

// watcher is inotify's; elsewhere there is none, and every entry is
// revalidated after at most a second (see Options.Revalidate).
type watcher struct{}

// dirNode is the watcher's node of a directory; there are none here.
type dirNode struct{ used atomic.Bool }

type watchTicket struct{ watched bool }

func newWatcher(*Cache, int) *watcher { return nil }

// catchUp has nothing to do: without a watcher, negative answers are
// trusted for revalidate (at most a second).
func (w *watcher) catchUp(context.Context) bool { return true }

func defaultMaxWatches() int { return 8192 }

func (w *watcher) enter(string) watchTicket { return watchTicket{} }

// enterSettled gives the empty ticket: there are no nodes to make.
func (w *watcher) enterSettled(string) (watchTicket, bool) { return watchTicket{}, true }

func (w *watcher) publish(_ watchTicket, _ *meta, store func() (negGone, bool)) { store() }

// publishNegative stores a negative entry, indexed under no node.
func (w *watcher) publishNegative(_ watchTicket, insert func(uint64, int32, bool) (negRef, negGone, bool)) {
	insert(0, -1, false)
}

func (w *watcher) forgetNegative(negGone) {}

func (w *watcher) forgetNegatives([]negGone) {}

func (w *watcher) markUsed(int32) {}

func (w *watcher) leave(watchTicket) {}

func (w *watcher) learnFS(watchTicket, string) {}

func (w *watcher) cachedOpens(watchTicket) bool { return false }

// enterCached gives no ticket: without inotify every miss holds a slot.
func (w *watcher) enterCached(string) (watchTicket, bool) { return watchTicket{}, false }

func (w *watcher) forget(*meta) {}

func (w *watcher) close() {}

// mountsChanged has nothing to drop: mounts are not watched here.
func (w *watcher) mountsChanged([]string) bool { return false }

func (w *watcher) mountsChanging() {}

func (w *watcher) mountsPending() bool { return false }

// listedMissing answers nothing: there are no listings without inotify.
func (w *watcher) listedMissing(lookupKey, time.Duration) bool { return false }

func (w *watcher) noteMissing(string, watchTicket, int) {}

func (w *watcher) unlistAll() {}

func (w *watcher) expireListings(time.Duration) {}
