package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/dataset/shards"
)

// runDataset runs "shadectl dataset <subcommand> ...".
func runDataset(args []string, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: shadectl dataset <subcommand> [flags]")
		fmt.Fprintln(w, "\nsubcommands:")
		fmt.Fprintln(w, "  import-idx --dst DIR [--src DIR] [--limit N]  turn Fashion-MNIST's IDX files into DIR/train and DIR/test (PNG ImageFolder trees)")
		fmt.Fprintln(w, "  index DIR [--json]                            sample count, bytes, version and classes of a dataset folder")
		fmt.Fprintln(w, "                                                (or of s3://BUCKET/PREFIX, shards:DIR, shards:s3://BUCKET/PREFIX)")
		fmt.Fprintln(w, "  index s3://...|shards:... --publish           also write the bucket's listing or the shards' index beside the")
		fmt.Fprintln(w, "                                                dataset, read by every peer instead of listing or indexing")
		fmt.Fprintln(w, "  unpublish s3://...|shards:...                 delete the listing or index published beside the dataset (and a")
		fmt.Fprintln(w, "                                                claim on making one): peers list or index it again")
		fmt.Fprintln(w, "  upload DIR s3://BUCKET/PREFIX [--s3-endpoint URL] [--s3-region R] [--s3-path-style]")
		fmt.Fprintln(w, "                                                put a dataset folder's samples into a bucket prefix, for --dataset NAME=s3://...")
	}
	if len(args) == 0 {
		usage(stderr)
		return errors.New("missing subcommand")
	}
	switch args[0] {
	case "import-idx":
		return runDatasetImportIDX(args[1:], stdout, stderr)
	case "index":
		return runDatasetIndex(args[1:], stdout, stderr)
	case "upload":
		return runDatasetUpload(args[1:], stdout, stderr)
	case "unpublish":
		return runDatasetUnpublish(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return nil
	default:
		usage(stderr)
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
}

func runDatasetImportIDX(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl dataset import-idx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	src := fs.String("src", dataset.DefaultIDXDir, "folder holding the (gzip'd) IDX files")
	dst := fs.String("dst", "", "folder to create with train/ and test/ (required)")
	limit := fs.Int("limit", 0, "import only the first `N` images of each split (0: all)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl dataset import-idx --dst DIR [--src DIR] [--limit N]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) > 0 {
		return fmt.Errorf("import-idx: unexpected argument %q", pos[0])
	}
	if *dst == "" {
		fs.Usage()
		return errors.New("import-idx: --dst is required")
	}
	abs, err := filepath.Abs(*dst)
	if err != nil {
		return err
	}

	bar := newProgressBar(stderr, "import-idx")
	start := time.Now()
	train, test, err := dataset.ImportIDX(dataset.ImportOptions{
		Src:      *src,
		Dst:      abs,
		Limit:    *limit,
		Progress: bar.update,
	})
	bar.finish()
	if err != nil {
		return err
	}
	verb := "imported"
	if !bar.used() {
		verb = "already imported" // a complete earlier import: nothing written
	}
	fmt.Fprintf(stdout, "%s %d train + %d test images in %s: %s %s\n", verb, train, test,
		time.Since(start).Round(time.Millisecond), filepath.Join(abs, "train"), filepath.Join(abs, "test"))
	return nil
}

func runDatasetUpload(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl dataset upload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s3cfg := s3Flags(fs)
	inFlight := fs.Int("parallel", 16, "objects sent at once")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl dataset upload DIR s3://BUCKET/PREFIX [flags]")
		fmt.Fprintln(fs.Output(), "Puts every sample of DIR (as 'dataset index' counts them) under the prefix, keyed by its")
		fmt.Fprintln(fs.Output(), "path relative to DIR; creates the bucket if needed; skips objects already there at the same size.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("upload: want a folder and an s3:// URL")
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	cfg := s3cfg()
	cfg.URL, cfg.MaxInFlight = pos[1], *inFlight
	bar := newProgressBar(stderr, "upload")
	start := time.Now()
	rep, err := s3source.Upload(context.Background(), cfg, dir, bar.update)
	bar.finish()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "uploaded %d samples (%s), %d already there, to %s in %s\n", rep.Uploaded, humanBytes(rep.Bytes),
		rep.Skipped, pos[1], time.Since(start).Round(time.Millisecond))
	if rep.Uploaded > 0 {
		return republishListing(cfg, stdout)
	}
	return nil
}

// republishListing lists cfg.URL's prefix and publishes the listing
// again where one was published: the peers that read it see what was
// just uploaded.
func republishListing(cfg s3source.Config, stdout io.Writer) error {
	if ok, err := s3source.HasAside(context.Background(), cfg, s3source.PublishedListing); !ok || err != nil {
		return err
	}
	cfg.Relist = true
	src, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		return err
	}
	if err := src.PublishListing(context.Background()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %s again (%d samples)\n", src.AsideURL(s3source.PublishedListing), src.Manifest().Len())
	return nil
}

// s3Flags adds --s3-endpoint, --s3-region and --s3-path-style to fs, with
// defaults from SHADE_S3_*, and returns the Config they give once parsed.
func s3Flags(fs *flag.FlagSet) func() s3source.Config {
	endpoint := fs.String("s3-endpoint", os.Getenv("SHADE_S3_ENDPOINT"), "URL of the S3-compatible store, http(s)://HOST[:PORT] (default: $SHADE_S3_ENDPOINT, else AWS S3); credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or the shared AWS files")
	region := fs.String("s3-region", os.Getenv("SHADE_S3_REGION"), "the bucket's region (default: $SHADE_S3_REGION)")
	pathStyle := fs.Bool("s3-path-style", os.Getenv("SHADE_S3_PATH_STYLE") == "true", "address buckets as ENDPOINT/BUCKET (default: $SHADE_S3_PATH_STYLE)")
	return func() s3source.Config {
		return s3source.Config{Endpoint: *endpoint, Region: *region, PathStyle: *pathStyle}
	}
}

// runDatasetUnpublish deletes what was published beside a dataset
// ('dataset index --publish', or peers with --publish-index): its listing
// or index, and a claim on making one left by a peer that died.
func runDatasetUnpublish(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl dataset unpublish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s3cfg := s3Flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl dataset unpublish s3://BUCKET/PREFIX|shards:DIR|shards:s3://BUCKET/PREFIX [--s3-... flags]")
		fmt.Fprintln(fs.Output(), "Deletes the listing or index published beside the dataset (.shade/listing, .shade/shards.index) and a")
		fmt.Fprintln(fs.Output(), "claim on making one: peers without one kept list or index the dataset again (and with --publish-index,")
		fmt.Fprintln(fs.Output(), "publish it again). Reads no sample and lists nothing.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("unpublish: want one s3:// URL or shards: location")
	}
	var removed []string
	switch loc, isShards := strings.CutPrefix(pos[0], shards.Prefix); {
	case isShards:
		removed, err = shards.Unpublish(context.Background(), shards.Config{Location: loc, S3: s3cfg()})
	case s3source.IsURL(pos[0]):
		cfg := s3cfg()
		cfg.URL = pos[0]
		for _, name := range []string{s3source.PublishedListing, s3source.ListingClaim} {
			var url string
			if url, err = s3source.RemoveAside(context.Background(), cfg, name); err != nil {
				break
			}
			if url != "" {
				removed = append(removed, url)
			}
		}
	default:
		return fmt.Errorf("unpublish: %s: nothing is published beside a dataset folder; want s3://BUCKET/PREFIX or shards:LOCATION", pos[0])
	}
	for _, r := range removed {
		fmt.Fprintf(stdout, "removed %s\n", r)
	}
	if err != nil {
		return fmt.Errorf("unpublish: %w", err)
	}
	if len(removed) == 0 {
		fmt.Fprintf(stdout, "nothing published beside %s\n", pos[0])
	}
	return nil
}

// indexReport is the --json output of "dataset index".
type indexReport struct {
	Dir        string   `json:"dir"`
	Samples    int      `json:"samples"`
	Bytes      int64    `json:"bytes"`
	Version    string   `json:"version"`
	Classes    int      `json:"classes"`
	ClassNames []string `json:"class_names"`
	// Published is where --publish wrote the listing or index ("" without
	// it).
	Published string `json:"published,omitempty"`
}

func runDatasetIndex(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl dataset index", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	publish := fs.Bool("publish", false, "write what peers read at their first start beside the dataset, for every peer to read instead: of s3://BUCKET/PREFIX its listing (PREFIX/.shade/listing; the dataset is then what it lists until published again), of shards: their index (DIR/.shade/shards.index, PREFIX/.shade/shards.index); needs write access there; run it again after the dataset changes")
	stateDir := fs.String("state-dir", "", "a peer's --state-dir (same --s3-endpoint): a shards: index kept there is read, and published with --publish, instead of reading the shards again; what is built is kept there")
	s3cfg := s3Flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl dataset index DIR|s3://BUCKET/PREFIX|shards:DIR|shards:s3://BUCKET/PREFIX [--json] [--publish] [--state-dir DIR] [--s3-... flags]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("index: want exactly one folder")
	}
	var (
		dir       string
		m         *dataset.Manifest
		published string
	)
	loc, isShards := strings.CutPrefix(pos[0], shards.Prefix)
	if *publish && !isShards && !s3source.IsURL(pos[0]) {
		return fmt.Errorf("index: --publish is for s3://BUCKET/PREFIX, shards:DIR and shards:s3://BUCKET/PREFIX, not %s", pos[0])
	}
	switch {
	case isShards:
		dir = pos[0]
		var src *shards.Source
		bar := newProgressBar(stderr, "index")
		src, err = shards.Open(context.Background(), shards.Config{Location: loc, S3: s3cfg(), StateDir: *stateDir, PublishIndex: *publish, Progress: bar.update})
		bar.finish()
		if err != nil {
			return err
		}
		m = src.Manifest()
		if *publish {
			published = src.PublishedAt()
		}
	case s3source.IsURL(pos[0]):
		dir = pos[0]
		cfg := s3cfg()
		cfg.URL, cfg.StateDir, cfg.Relist = pos[0], *stateDir, *publish // what is published is what the prefix holds now
		var src *s3source.Source
		if src, err = s3source.Open(context.Background(), cfg); err != nil {
			return err
		}
		m = src.Manifest()
		if *publish {
			if err := src.PublishListing(context.Background()); err != nil {
				return err
			}
			published = src.AsideURL(s3source.PublishedListing)
		}
	default:
		if dir, err = filepath.Abs(pos[0]); err != nil {
			return err
		}
		var progress func(int)
		tty := isTerminal(stderr)
		if tty {
			progress = func(n int) { fmt.Fprintf(stderr, "\rscanning: %d files", n) }
		}
		m, err = dataset.Scan(dir, progress)
		if tty {
			fmt.Fprint(stderr, "\r\033[K")
		}
		if err != nil {
			return err
		}
	}
	r := indexReport{
		Dir:        dir,
		Samples:    m.Len(),
		Bytes:      m.TotalBytes(),
		Version:    m.Version,
		ClassNames: m.Classes(),
		Published:  published,
	}
	r.Classes = len(r.ClassNames)
	if r.ClassNames == nil {
		r.ClassNames = []string{}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(stdout, "dir      %s\n", r.Dir)
	fmt.Fprintf(stdout, "samples  %d\n", r.Samples)
	fmt.Fprintf(stdout, "bytes    %d (%s)\n", r.Bytes, humanBytes(r.Bytes))
	fmt.Fprintf(stdout, "version  %s\n", r.Version)
	fmt.Fprintf(stdout, "classes  %d\n", r.Classes)
	if r.Published != "" {
		fmt.Fprintf(stdout, "published %s\n", r.Published)
	}
	return nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("index DIR --json"), which flag.Parse alone stops at. After a
// "--", everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagError turns --help into success (the flag package has printed the
// usage) and keeps other parse errors, which it has reported too.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return fmt.Errorf("bad arguments: %w", err)
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// progressBar draws progress on a terminal as one line redrawn with '\r',
// and elsewhere (a log, a pipe) as a line at every 10%. update must not be
// called concurrently (ImportIDX serializes its Progress calls).
type progressBar struct {
	w       io.Writer
	label   string
	tty     bool
	start   time.Time
	calls   int
	lastPct int // last percentage drawn
	drawn   bool
}

func newProgressBar(w io.Writer, label string) *progressBar {
	return &progressBar{w: w, label: label, tty: isTerminal(w), start: time.Now(), lastPct: -1}
}

func (p *progressBar) update(done, total int) {
	p.calls++
	if total <= 0 {
		return
	}
	pct := done * 100 / total
	if p.tty {
		if pct == p.lastPct && done != total {
			return
		}
		const width = 30
		fill := done * width / total
		fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %d/%d %s", p.label,
			strings.Repeat("#", fill), strings.Repeat("-", width-fill), pct, done, total,
			time.Since(p.start).Round(100*time.Millisecond))
		p.lastPct, p.drawn = pct, true
		return
	}
	if step := pct / 10 * 10; step > p.lastPct && step > 0 {
		fmt.Fprintf(p.w, "%s: %3d%% (%d/%d) %s\n", p.label, step, done, total,
			time.Since(p.start).Round(100*time.Millisecond))
		p.lastPct = step
	}
}

// finish ends the terminal line, if one was drawn.
func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// used reports whether update was ever called.
func (p *progressBar) used() bool { return p.calls > 0 }

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
