package flashserve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// residencyCommand is `caddy flash-serve residency PATH...`.
func residencyCommand() *cobra.Command {
	var asJSON bool
	var top int
	cmd := &cobra.Command{
		Use:   "residency PATH...",
		Short: "Reports how much of the files under each PATH are in the page cache (vmtouch-style)",
		Args:  needPaths("residency"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if top < 0 {
				return fmt.Errorf("--top %d: need 0 or more", top)
			}
			for _, path := range args {
				if err := checkPath("path", path, false); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			for i, path := range args {
				res, err := prewarm.Residencies([]string{path})
				if err != nil {
					return err
				}
				if !asJSON {
					if i > 0 {
						fmt.Fprintln(out)
					}
					fmt.Fprintf(out, "%s\n", path)
				}
				if err := printResidency(out, path, res, asJSON, top); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "Print JSON")
	cmd.Flags().IntVar(&top, "top", 10, "How many files to list, largest resident first")
	return cmd
}

// needPaths refuses a command line of the subcommand name without a PATH.
func needPaths(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("%s needs at least one PATH: a directory or a file", name)
		}
		return nil
	}
}

// unknownResidency is what the reports say of files whose residency this
// process cannot know: mincore lies to a process that neither owns a file
// nor may write it.
const unknownResidency = "unknown (not owner)"

func printResidency(w io.Writer, path string, res []prewarm.Residency, asJSON bool, top int) error {
	sum := prewarm.Summarize(res)
	slices.SortFunc(res, func(a, b prewarm.Residency) int {
		switch {
		case a.Known != b.Known:
			if a.Known {
				return -1
			}
			return 1
		case a.Resident > b.Resident:
			return -1
		case a.Resident < b.Resident:
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	shown := res[:min(top, len(res))]
	if asJSON {
		// resident_bytes and resident_percent cover the files whose
		// residency is known; both are null when none is.
		var resident, pct any
		if sum.AnyKnown() {
			resident, pct = sum.Resident, sum.Percent()
		}
		return json.NewEncoder(w).Encode(map[string]any{
			"path": path, "files": sum.Files, "bytes": sum.Bytes, "known": sum.Known(),
			"resident_bytes": resident, "resident_percent": pct,
			"unknown_files": sum.UnknownFiles, "unknown_bytes": sum.UnknownBytes, "top": shown,
		})
	}
	fmt.Fprintf(w, "           Files: %d\n", sum.Files)
	switch {
	case sum.Known():
		fmt.Fprintf(w, "  Resident bytes: %s/%s  %.1f%%\n", humanize.IBytes(uint64(sum.Resident)), humanize.IBytes(uint64(sum.Bytes)), sum.Percent())
	case !sum.AnyKnown():
		fmt.Fprintf(w, "  Resident bytes: %s\n", unknownResidency)
	default:
		fmt.Fprintf(w, "  Resident bytes: %s/%s  %.1f%% of those known; %s in %d files %s\n",
			humanize.IBytes(uint64(sum.Resident)), humanize.IBytes(uint64(sum.KnownBytes)), sum.Percent(),
			humanize.IBytes(uint64(sum.UnknownBytes)), sum.UnknownFiles, unknownResidency)
	}
	if len(shown) > 0 {
		fmt.Fprintf(w, "\n%10s %10s %6s  %s\n", "resident", "size", "%", "file")
		for _, r := range shown {
			if !r.Known {
				fmt.Fprintf(w, "%10s %10s %6s  %s  %s\n", "?", humanize.IBytes(uint64(r.Size)), "?", r.Path, unknownResidency)
				continue
			}
			fmt.Fprintf(w, "%10s %10s %5.1f%%  %s\n", humanize.IBytes(uint64(r.Resident)), humanize.IBytes(uint64(r.Size)), r.Percent(), r.Path)
		}
	}
	return nil
}

// prewarmCommand is `caddy flash-serve prewarm PATH... --budget SIZE`.
func prewarmCommand() *cobra.Command {
	var budget string
	var workers int
	cmd := &cobra.Command{
		Use:   "prewarm PATH... [--budget SIZE]",
		Short: "Reads the files under PATH into the page cache, within a budget",
		Args:  needPaths("prewarm"),
		RunE: func(cmd *cobra.Command, args []string) error {
			limit, err := humanize.ParseBytes(budget)
			if err != nil {
				return fmt.Errorf("--budget %q is not a size (e.g. 512MiB, 2GiB; 0 for no limit)", budget)
			}
			if workers < 1 || workers > maxPrewarmWorkers {
				return fmt.Errorf("--workers %d: need 1 to %d", workers, maxPrewarmWorkers)
			}
			for _, a := range args {
				if err := checkPath("path", a, false); err != nil {
					return err
				}
			}
			var targets []prewarm.Target
			for _, a := range args {
				abs, err := filepath.Abs(a)
				if err != nil {
					return err
				}
				if info, err := os.Stat(abs); err == nil && info.Mode().IsRegular() {
					targets = append(targets, prewarm.Target{Path: abs, Size: info.Size()})
					continue
				}
				ts, err := prewarm.Expand(abs, []string{"*"})
				if err != nil {
					return err
				}
				targets = append(targets, ts...)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			out := cmd.OutOrStdout()
			var total int64
			for _, t := range targets {
				total += t.Size
			}
			goal := total
			if limit > 0 {
				goal = min(total, int64(limit))
			}
			tty := isTerminal(out)
			w := &prewarm.Warmer{Budget: int64(limit), Workers: workers, Every: time.Second}
			if tty {
				w.Every = 200 * time.Millisecond
			}
			w.OnProgress = func(p prewarm.Progress) { printProgress(out, p, goal, tty) }
			// Read through io_uring where there is one, as the server does,
			// so that many workers on a slow disk hold no threads; pread
			// otherwise, and for any read the ring itself fails. Nothing
			// is logged: the command prints its progress, not the server's
			// warnings.
			ring := transmit.AcquireRing(max(1, workers), false, zap.NewNop())
			defer transmit.ReleaseRing()
			if ring != nil {
				w.ReadAt = ring.ReadLending
			}
			_, err = w.Run(ctx, targets)
			return err
		},
	}
	cmd.Flags().StringVar(&budget, "budget", "1GiB", "The most bytes to read (0: no limit)")
	cmd.Flags().IntVar(&workers, "workers", 2, "Files read at once")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// printProgress draws a progress bar on a terminal, and plain lines
// elsewhere (a log, a pipe).
func printProgress(w io.Writer, p prewarm.Progress, goal int64, tty bool) {
	pct := 100.0
	if goal > 0 {
		pct = min(100, 100*float64(p.Bytes)/float64(goal))
	}
	rate := p.Rate()
	eta := "–"
	if rate > 0 && goal > p.Bytes {
		eta = time.Duration(float64(goal-p.Bytes) / rate * float64(time.Second)).Round(time.Second).String()
	}
	line := fmt.Sprintf("%5.1f%%  files %d  %s/%s  %s/s  ETA %s", pct, p.Files,
		humanize.IBytes(uint64(p.Bytes)), humanize.IBytes(uint64(goal)), humanize.IBytes(uint64(rate)), eta)
	switch {
	case tty && p.Done:
		fmt.Fprintf(w, "\r%s %s  done in %s\n", bar(pct), line, time.Since(p.Started).Round(time.Millisecond))
	case tty:
		fmt.Fprintf(w, "\r%s %s", bar(pct), line)
	case p.Done:
		fmt.Fprintf(w, "prewarm done: %s in %s\n", line, time.Since(p.Started).Round(time.Millisecond))
	default:
		fmt.Fprintf(w, "prewarm: %s\n", line)
	}
}

func bar(pct float64) string {
	const width = 30
	n := int(pct / 100 * width)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
