//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// residentBody is reviewBody with what the handler knows of the file's
// residency, and of its filesystem, set by the test.
type residentBody struct {
	reviewBody
	recent, noBlock bool
}

func (b residentBody) RecentlyResident() bool { return b.recent }
func (b residentBody) NoBlockDevice() bool    { return b.noBlock }

// readAll brings a file's pages into the page cache.
func readAll(t *testing.T, b Body) {
	t.Helper()
	if _, err := io.Copy(io.Discard, io.NewSectionReader(b.File(), 0, b.Size())); err != nil {
		t.Fatal(err)
	}
}

// TestRawCallOnlyWhereResident: a sendfile call is made raw only for a
// chunk of at least rawCallMin whose pages were seen in the page cache
// within rawFresh (the handler's knowledge, or the loop's own probe for a
// body of at least rawProbeMin), and never on a filesystem without a
// block device.
func TestRawCallOnlyWhereResident(t *testing.T) {
	const size = 16 << 20
	f, _ := testFile(t, size)
	body := residentBody{reviewBody: reviewBody{f}}
	src := func(b Body, known bool, n int64) *fileSource {
		return &fileSource{File: f, FD: int(f.Fd()), N: n, Res: newResidency(b, n, known)}
	}
	now := time.Now()
	readAll(t, body)
	if !src(body, true, size).rawCall(maxSendfileCall, now) {
		t.Error("a chunk known resident is not raw")
	}
	if src(body, true, size).rawCall(rawCallMin-1, now) {
		t.Error("a chunk below rawCallMin is raw")
	}
	if !src(body, false, size).rawCall(maxSendfileCall, now) {
		t.Error("a resident chunk of a large body is not raw after the loop's own probe")
	}
	if src(body, false, rawProbeMin-1).rawCall(rawCallMin, now) {
		t.Error("a body below rawProbeMin, not known resident, was probed and sent raw")
	}
	noBlock := body
	noBlock.noBlock = true
	if src(noBlock, true, size).rawCall(maxSendfileCall, now) {
		t.Error("a file without a block device is sent raw")
	}

	evict(t, f)
	if n, _ := pagecache.Count(int(f.Fd()), size); n > size/2 {
		t.Skipf("the page cache kept %d of %d bytes after FADV_DONTNEED", n, size)
	}
	if src(body, false, size).rawCall(maxSendfileCall, now) {
		t.Error("an evicted chunk is raw")
	}
	// What the handler saw stands for rawFresh, then the probe asks again.
	stale := src(body, true, size)
	if !stale.rawCall(maxSendfileCall, now) {
		t.Error("a chunk the handler just saw resident is not raw")
	}
	if stale.rawCall(maxSendfileCall, time.Now().Add(rawFresh)) {
		t.Error("an evicted chunk is raw on knowledge older than rawFresh")
	}
}

// sendfileLog records the listener wrapper's sendfile calls, raw or not,
// and whether each raw call's pages were all in the page cache when it
// was made.
type sendfileLog struct {
	mu                         sync.Mutex
	calls, raw, rawNotResident int
}

func logSendfile(t *testing.T) *sendfileLog {
	l := &sendfileLog{}
	prev, prevRaw := sendfileCall, rawSendfileCall
	sendfileCall = func(out, in int, off *int64, n int) (int, error) {
		l.mu.Lock()
		l.calls++
		l.mu.Unlock()
		return prev(out, in, off, n)
	}
	rawSendfileCall = func(out, in int, off *int64, n int) (int, error) {
		p := pagecache.NewProbe(in, true)
		got, err := p.Resident(*off, int64(n))
		l.mu.Lock()
		l.calls++
		l.raw++
		if err != nil || got < int64(n) {
			l.rawNotResident++
		}
		l.mu.Unlock()
		return prevRaw(out, in, off, n)
	}
	t.Cleanup(func() { sendfileCall, rawSendfileCall = prev, prevRaw })
	return l
}

// TestRawSendfileThroughTheWrapper: a body the handler knows resident
// leaves in raw calls, byte for byte, counted as sendfile; one evicted
// before it is sent starts with ordinary calls, and no raw call is ever
// made over a page that is not in the page cache.
func TestRawSendfileThroughTheWrapper(t *testing.T) {
	const size = 24<<20 + 4321
	f, want := testFile(t, size)
	var body atomic.Pointer[residentBody]
	s := &Sender{Logger: zap.NewNop()}
	counts := make(chan Counts, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		sent, err := s.Send(w, r, *body.Load(), &Transfer{Engine: EngineSendfile}, 0, size)
		if err != nil {
			t.Errorf("Send: %v", err)
		}
		counts <- sent
	})}
	go srv.Serve((ListenerWrapper{}).WrapListener(ln))
	defer srv.Close()
	get := func() []byte {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	for _, c := range []struct {
		name    string
		evicted bool
	}{{"known resident", false}, {"evicted", true}} {
		b := residentBody{reviewBody: reviewBody{f}, recent: !c.evicted}
		if c.evicted {
			evict(t, f)
		} else {
			readAll(t, b)
		}
		body.Store(&b)
		l := logSendfile(t)
		before := Snapshot()
		got := get()
		sent := <-counts
		after := Snapshot()
		if !bytes.Equal(got, want) || sent[EngineSendfile] != size {
			t.Errorf("%s: %d bytes (right: %v), counts %v", c.name, len(got), bytes.Equal(got, want), sent)
		}
		l.mu.Lock()
		calls, raw, bad := l.calls, l.raw, l.rawNotResident
		l.mu.Unlock()
		t.Logf("%s: %d sendfile calls, %d raw", c.name, calls, raw)
		if bad != 0 {
			t.Errorf("%s: %d raw calls over pages not in the page cache", c.name, bad)
		}
		// The counter counts chunks (as SendfileCalls does), the log every
		// attempt, a chunk retried after a wait for the socket included.
		if d := after.SendfileRawCalls - before.SendfileRawCalls; d > int64(raw) || (d == 0) != (raw == 0) {
			t.Errorf("%s: SendfileRawCalls grew by %d, %d raw calls made", c.name, d, raw)
		}
		if !c.evicted && raw < size/maxSendfileCall/2 {
			t.Errorf("%s: %d raw calls of %d, want most of the %d chunks", c.name, raw, calls, size/maxSendfileCall)
		}
	}
}

// TestYieldToNetpollRunsReadyConnections: with one P, a goroutine that
// never blocks lets a goroutine whose connection became readable run
// within two yields (runtime.Gosched alone leaves it to the scheduler's
// monitor, every 10 ms).
func TestYieldToNetpollRunsReadyConnections(t *testing.T) {
	if netpollYielder() == nil {
		t.Fatal("no eventfd for the yielder")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c1, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		c1.Read(b[:])
		ran.Store(true)
	}()
	// Let the reader park on its connection.
	for range 3 {
		runtime.Gosched()
	}
	if _, err := c2.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	yields := 0
	for !ran.Load() && yields < 2 {
		yieldToNetpoll()
		yields++
	}
	if !ran.Load() {
		t.Errorf("the reader did not run within %d yields", yields)
	}
	<-done
	t.Logf("the reader ran after %d yields", yields)
}
