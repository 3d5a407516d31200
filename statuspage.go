package flashserve

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"mime"
	"net/http"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/dustin/go-humanize"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// The status page: GET /flash_serve/ on the admin endpoint, for a client
// that accepts text/html (a browser); others get the JSON of
// /flash_serve/stats. It is one self-contained document (inline CSS and
// SVG, no script, no other request), whose every figure carries the JSON
// path of /flash_serve/stats it shows (data-stat) and its exact value
// (data-value), so that a program can check the page against the JSON.

//go:embed statuspage.html
var statusPageText string

var statusPageTemplate = template.Must(template.New("status").Parse(statusPageText))

// wantsHTML tells whether the Accept header of r asks for text/html (with a
// q above 0): a browser's does, a program's (curl's */*) does not.
func wantsHTML(r *http.Request) bool {
	for _, field := range r.Header.Values("Accept") {
		for _, part := range strings.Split(field, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != "text/html" {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); params["q"] == "" || (err == nil && q > 0) {
				return true
			}
		}
	}
	return false
}

// statusIndex answers GET /flash_serve/: the status page for a browser,
// /flash_serve/stats for a program.
func (a *AdminAPI) statusIndex(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Path != "/flash_serve/" {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no flash_serve endpoint %s: there are /flash_serve/ (the status page), /flash_serve/stats, /flash_serve/purge and /flash_serve/prewarm", r.URL.Path)}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r.Method, http.MethodGet)
	}
	w.Header().Add("Vary", "Accept")
	if !wantsHTML(r) {
		return writeJSON(w, http.StatusOK, snapshot())
	}
	refresh := 0
	if v := r.URL.Query().Get("refresh"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3600 {
			return badRequest(fmt.Errorf("refresh=%q: give the seconds between reloads of the page, 1 to 3600", v))
		}
		refresh = n
	}
	var hist []sample
	every := sampleEvery
	if smp := currentSampler(); smp != nil {
		hist, every = smp.samples(), smp.every
	}
	var buf bytes.Buffer
	if err := statusPageTemplate.Execute(&buf, newStatusView(snapshot(), hist, every, refresh, time.Now())); err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Nothing but the document itself: its inline style, no script, no
	// request anywhere.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, err := w.Write(buf.Bytes())
		return err
	}
	return nil
}

// statusView is what the page template renders.
type statusView struct {
	Generated string
	Version   string
	Refresh   int
	// Window says how long the sparklines span, Samples how many samples
	// they have, SampleEvery how often one is taken.
	Window, SampleEvery string
	Samples             int

	HitRatio                      fig
	Hits, NegHits, Misses, Merged fig
	QueueDepth                    fig
	HitRatioSpark, LookupSpark    spark

	Engines []engineRow

	Descriptors, Negatives, Memory, Cold, HotSet meter
	DescriptorSpark, NegativeSpark, ColdSpark    spark
	Ring                                         bool
	RingReads, RingSlots                         fig
	HotSetUnknown, PrewarmBytes, PrewarmFiles    fig
	PrewarmRunning                               fig

	InFlight      fig
	InFlightSpark spark
	Rejected      []fig

	Sites  []siteRow
	Caches []cacheRow
}

// fig is one figure of the page: Path is its place in the JSON of
// /flash_serve/stats (keys and indexes joined by dots), Value its exact
// value as the JSON has it ("" for null), Text what the page shows.
type fig struct {
	Path, Value, Text string
}

// meter is a figure against its bound; Pct is the share used, 0 to 100,
// None says there is no bound (0: the feature is off), NoneText how the
// page says so.
type meter struct {
	Used, Limit       fig
	Pct               float64
	PctText, NoneText string
	None              bool
}

// spark is a sparkline: the points of a polyline in a 120×24 box, the area
// under it, and what its last point and its peak say.
type spark struct {
	Points, Area string
	Now, Peak    string
	Label        string
	Empty        bool
}

type engineRow struct {
	Name            string
	Requests, Bytes fig
	Spark           spark
}

type siteRow struct {
	ID, Cache                   int64
	Root, RootNote              string
	Hits, NegHits, Misses, Rate fig
	Spark                       spark
}

type cacheRow struct {
	ID                                                  int
	Entries, Negatives, OpenFiles, MaxOpen, Memory      fig
	Watched, Evictions, NegEvictions, Invalidated, Shed fig
}

func figInt(path string, v int64) fig {
	return fig{Path: path, Value: strconv.FormatInt(v, 10), Text: humanize.Comma(v)}
}

func figBytes(path string, v int64) fig {
	return fig{Path: path, Value: strconv.FormatInt(v, 10), Text: humanize.IBytes(uint64(max(v, 0)))}
}

func figRatio(path string, r *float64) fig {
	if r == nil {
		return fig{Path: path, Text: "–"}
	}
	return fig{Path: path, Value: strconv.FormatFloat(*r, 'g', -1, 64), Text: percent(*r)}
}

// percent writes a share as a percentage with one decimal, but never
// rounds a share below 1 up to "100.0 %", nor one above 0 down to "0.0 %".
func percent(r float64) string {
	p := math.Floor(r*1000) / 10
	if p == 0 && r > 0 {
		return "< 0.1 %"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + " %"
}

func newMeter(used, limit fig, u, l int64) meter {
	m := meter{Used: used, Limit: limit, NoneText: "off"}
	if l <= 0 {
		m.None = true
		return m
	}
	r := min(float64(u)/float64(l), 1)
	m.Pct = math.Round(r*1000) / 10
	m.PctText = percent(float64(u) / float64(l))
	return m
}

// newStatusView lays out s, with the sparklines of hist, samples taken
// every so often.
func newStatusView(s Stats, hist []sample, every time.Duration, refresh int, now time.Time) statusView {
	v := statusView{
		Generated:   now.Format("2006-01-02 15:04:05 MST"),
		Refresh:     refresh,
		Window:      spanText(every * sampleCount),
		SampleEvery: spanText(every),
		Samples:     len(hist),
	}
	bi, _ := debug.ReadBuildInfo()
	_, caddyVersion := caddy.Version()
	v.Version = "flash_serve " + moduleVersion(bi, reflect.TypeFor[FlashServe]().PkgPath()) + " · Caddy " + caddyVersion

	l := s.Lookups
	v.HitRatio = figRatio("lookups.hit_ratio", l.HitRatio)
	v.Hits, v.NegHits = figInt("lookups.hits", l.Hits), figInt("lookups.negative_hits", l.NegativeHits)
	v.Misses, v.Merged = figInt("lookups.misses", l.Misses), figInt("lookups.merged", l.Merged)
	v.QueueDepth = figInt("lookups.queue_depth", l.QueueDepth)
	v.HitRatioSpark = ratioSpark(hist, func(s sample) (int64, int64) { return s.hits, s.lookups }, "hit ratio")
	v.LookupSpark = rateSpark(hist, func(s sample) int64 { return s.lookups }, "lookups", func(f float64) string { return humanize.CommafWithDigits(f, 1) + "/s" })

	for e := range transmit.NumEngines {
		name := e.String()
		es := s.Engines[name]
		v.Engines = append(v.Engines, engineRow{
			Name:     name,
			Requests: figInt("engines."+name+".requests", es.Requests),
			Bytes:    figBytes("engines."+name+".bytes", es.Bytes),
			Spark:    rateSpark(hist, func(s sample) int64 { return s.bytes[e] }, name+" bytes", bytesPerSecond),
		})
	}

	c := s.Cache
	v.Descriptors = newMeter(figInt("cache.open_files", c.OpenFiles), figInt("cache.max_open_files", c.MaxOpenFiles), c.OpenFiles, c.MaxOpenFiles)
	v.DescriptorSpark = gaugeSpark(hist, func(s sample) int64 { return s.openFiles }, "open descriptors", humanize.Comma)
	v.Negatives = newMeter(figInt("cache.negative_entries", c.NegativeEntries), figInt("cache.max_negative_entries", c.MaxNegative), c.NegativeEntries, c.MaxNegative)
	v.NegativeSpark = gaugeSpark(hist, func(s sample) int64 { return s.negativeEntries }, "negative entries", humanize.Comma)
	v.Memory = newMeter(figBytes("cache.memory_bytes", c.MemoryBytes), figBytes("cache.memory_budget", c.MemoryBudget), c.MemoryBytes, c.MemoryBudget)

	cr := s.ColdReads
	v.Cold = newMeter(figBytes("cold_reads.buffer_bytes", cr.BufferBytes), figBytes("cold_reads.buffer_limit", cr.BufferLimit), cr.BufferBytes, cr.BufferLimit)
	v.ColdSpark = gaugeSpark(hist, func(s sample) int64 { return s.coldBytes }, "cold budget in use", func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) })
	v.Ring = cr.Ring
	v.RingReads, v.RingSlots = figInt("cold_reads.ring_reads", cr.RingReads), figInt("cold_reads.ring_slots", cr.RingSlots)

	p := s.Prewarm
	v.HotSet = newMeter(figBytes("prewarm.hot_set_resident_bytes", p.HotSetResidentBytes), figBytes("prewarm.hot_set_bytes", p.HotSetBytes), p.HotSetResidentBytes, p.HotSetBytes)
	v.HotSet.NoneText = "none saved"
	v.HotSetUnknown = figBytes("prewarm.hot_set_unknown_bytes", p.HotSetUnknownBytes)
	v.PrewarmBytes, v.PrewarmFiles = figBytes("prewarm.bytes", p.Bytes), figInt("prewarm.files", p.Files)
	v.PrewarmRunning = figInt("prewarm.running", p.Running)

	v.InFlight = figInt("transfers_in_flight", s.TransfersInFlight)
	v.InFlightSpark = gaugeSpark(hist, func(s sample) int64 { return s.inFlight }, "bodies in flight", humanize.Comma)
	for _, cause := range []string{"max_transfers", "stat_queue", "fd_exhaustion"} {
		f := figInt("rejected."+cause, s.Rejected[cause])
		f.Text = cause + " " + f.Text
		v.Rejected = append(v.Rejected, f)
	}

	for i, st := range s.Sites {
		path := "sites." + strconv.Itoa(i) + "."
		row := siteRow{
			ID: st.ID, Cache: int64(st.Cache), Root: st.Root,
			Hits: figInt(path+"hits", st.Hits), NegHits: figInt(path+"negative_hits", st.NegativeHits),
			Misses: figInt(path+"misses", st.Misses), Rate: figRatio(path+"hit_ratio", st.HitRatio),
		}
		switch {
		case st.Root == "":
			row.Root, row.RootNote = st.RootSetting, "no request yet"
		case st.RootSetting != "" && st.OtherRoots:
			row.RootNote = st.RootSetting + ", and other roots"
		case st.RootSetting != "":
			row.RootNote = st.RootSetting
		}
		id := st.ID
		row.Spark = rateSpark(hist, func(s sample) int64 {
			for _, ss := range s.sites {
				if ss.id == id {
					return ss.lookups
				}
			}
			return -1
		}, "lookups", func(f float64) string { return humanize.CommafWithDigits(f, 1) + "/s" })
		v.Sites = append(v.Sites, row)
	}
	for i, ci := range s.CacheInstances {
		path := "cache_instances." + strconv.Itoa(i) + "."
		v.Caches = append(v.Caches, cacheRow{
			ID:           ci.ID,
			Entries:      figInt(path+"entries", ci.Entries),
			Negatives:    figInt(path+"negative_entries", ci.NegativeEntries),
			OpenFiles:    figInt(path+"open_files", ci.OpenFiles),
			MaxOpen:      figInt(path+"max_open_files", ci.MaxOpenFiles),
			Memory:       figBytes(path+"memory_bytes", ci.MemoryBytes),
			Watched:      figInt(path+"watched_dirs", ci.WatchedDirs),
			Evictions:    figInt(path+"evictions", ci.Evictions),
			NegEvictions: figInt(path+"negative_evictions", ci.NegativeEvictions),
			Invalidated:  figInt(path+"invalidations", ci.Invalidations),
			Shed:         figInt(path+"shed", ci.Shed),
		})
	}
	return v
}

// spanText writes a duration as the page says it: "10 min", "5 s".
func spanText(d time.Duration) string {
	switch {
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d%time.Second == 0:
		return strconv.Itoa(int(d/time.Second)) + " s"
	}
	return d.String()
}

func bytesPerSecond(f float64) string { return humanize.IBytes(uint64(max(f, 0))) + "/s" }

// The sparklines' box: a sample interval a unit wide, the newest at the
// right edge, so that a line of few samples is short, not stretched.
const (
	sparkWidth  = sampleCount - 1
	sparkHeight = 24
)

// point is one point of a sparkline: its sample's index in the ring's
// history and its value.
type point struct {
	i int
	v float64
}

// drawSpark lays points out in the sparkline's box, n being the samples
// of the history; scale is the value of the top of the box, or 0 for the
// peak (a flat line of zeros lies on the bottom).
func drawSpark(points []point, n int, label string, format func(float64) string, scale float64) spark {
	sp := spark{Label: label}
	if len(points) < 2 {
		sp.Empty = true
		return sp
	}
	peak := 0.0
	for _, p := range points {
		peak = max(peak, p.v)
	}
	top := peak
	if scale > 0 {
		top = scale
	}
	var line, area strings.Builder
	x := func(i int) float64 { return float64(sparkWidth - (n - 1 - i)) }
	y := func(v float64) float64 {
		if top == 0 {
			return sparkHeight - 1
		}
		return sparkHeight - 1 - (v/top)*(sparkHeight-2)
	}
	for k, p := range points {
		if k > 0 {
			line.WriteByte(' ')
		}
		fmt.Fprintf(&line, "%.1f,%.1f", x(p.i), y(p.v))
	}
	fmt.Fprintf(&area, "%.1f,%d %s %.1f,%d", x(points[0].i), sparkHeight, line.String(), x(points[len(points)-1].i), sparkHeight)
	sp.Points, sp.Area = line.String(), area.String()
	sp.Now, sp.Peak = format(points[len(points)-1].v), format(peak)
	return sp
}

// rateSpark draws the rate per second of a counter between samples; a
// counter that reads -1 (a site not in the sample) leaves a gap.
func rateSpark(hist []sample, counter func(sample) int64, label string, format func(float64) string) spark {
	var pts []point
	for i := 1; i < len(hist); i++ {
		a, b := counter(hist[i-1]), counter(hist[i])
		dt := hist[i].at.Sub(hist[i-1].at).Seconds()
		if a < 0 || b < 0 || dt <= 0 {
			continue
		}
		pts = append(pts, point{i, float64(max(b-a, 0)) / dt})
	}
	return drawSpark(pts, len(hist), label, format, 0)
}

// ratioSpark draws hits over lookups between samples, skipping intervals
// without a lookup.
func ratioSpark(hist []sample, counts func(sample) (hits, lookups int64), label string) spark {
	var pts []point
	for i := 1; i < len(hist); i++ {
		h0, l0 := counts(hist[i-1])
		h1, l1 := counts(hist[i])
		if l1 > l0 {
			pts = append(pts, point{i, float64(max(h1-h0, 0)) / float64(l1-l0)})
		}
	}
	return drawSpark(pts, len(hist), label, percent, 1)
}

// gaugeSpark draws a gauge as sampled.
func gaugeSpark(hist []sample, gauge func(sample) int64, label string, format func(int64) string) spark {
	pts := make([]point, len(hist))
	for i, s := range hist {
		pts[i] = point{i, float64(gauge(s))}
	}
	return drawSpark(pts, len(hist), label, func(f float64) string { return format(int64(f)) }, 0)
}
