// Package dataset describes the training data a Shade mesh serves: named,
// read-only, ordered lists of samples from a backing source.
//
// A dataset's Manifest is the ordered list of its samples' names and sizes;
// sample i is the i-th entry, and the hash of the manifest is the dataset's
// version. Dir is the directory-backed source; dataset/s3source serves a
// bucket prefix of an S3-compatible store and dataset/shards WebDataset tar
// shards. The package also turns the Fashion-MNIST IDX files into an
// ImageFolder tree (ImportIDX).
//
// The package is a leaf: it touches the file system only and has no
// package-level mutable state.
package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

var (
	// ErrOutOfRange is returned for a sample index outside [0, Len()).
	ErrOutOfRange = errors.New("dataset: index out of range")
	// ErrChanged is returned when a sample's file vanished or its size
	// differs from the manifest's: the source moved on since the scan.
	ErrChanged = errors.New("dataset: sample changed since the manifest was built")
	// ErrEmpty is returned when a source holds no samples.
	ErrEmpty = errors.New("dataset: no samples")
	// ErrSymlinkLoop is returned by Scan when following symbolic links
	// leads back into a directory being walked, or a link resolves to itself.
	ErrSymlinkLoop = errors.New("dataset: symlink loop")
)

// progressEvery is how many files Scan finds between progress calls.
const progressEvery = 1000

// Manifest is the ordered list of a dataset's samples. Sample i is named
// Names.At(i) (a relative path with '/' separators for a directory source) and
// is Sizes.At(i) bytes long. Version is the hex hash of every (name, size)
// pair in order; see VersionOf.
//
// Encoding says how a sample's bytes are to be read: "" for a file's
// own bytes, EncodingWDS for a WebDataset sample. The mesh serves it in
// SHADE.STATS (a dataset's "encoding") so that clients can decode samples.
//
// A Manifest is read-only once built: it may be shared between goroutines,
// and callers must not modify its slices.
type Manifest struct {
	Names    Names
	Sizes    Sizes
	Version  string
	Encoding string
}

// EncodingWDS is the Encoding of a WebDataset shard dataset: each sample
// is one MessagePack map from member extension to bytes, as package
// dataset/shards documents it.
const EncodingWDS = "wds"

// Len returns the number of samples.
func (m *Manifest) Len() int { return m.Names.Len() }

// TotalBytes returns the sum of all sample sizes.
func (m *Manifest) TotalBytes() int64 {
	var n int64
	for i := range m.Sizes.Len() {
		n += m.Sizes.At(i)
	}
	return n
}

// Class returns the first path element of sample i's name (its ImageFolder
// class), or "" when the sample lies at the top level. It panics if i is
// out of range.
func (m *Manifest) Class(i int) string {
	name := m.Names.At(i)
	if j := strings.IndexByte(name, '/'); j >= 0 {
		return name[:j]
	}
	return ""
}

// Classes returns the distinct classes (first-level folders) in manifest
// order, which is their sorted order for a manifest built by Scan.
func (m *Manifest) Classes() []string {
	var classes []string
	for i := range m.Names.Len() {
		c := m.Class(i)
		if c != "" && (len(classes) == 0 || classes[len(classes)-1] != c) {
			classes = append(classes, c)
		}
	}
	return classes
}

// VersionOf returns the version of a manifest with these names and sizes:
// the first 16 bytes of a SHA-256 over every (name, size) pair in order,
// in lower-case hex (32 characters). Contents are not hashed: rewriting a
// file in place with the same size keeps the version, and Dir.Read checks
// sizes only. names and sizes must have the same length.
func VersionOf(names Names, sizes []int64) string {
	h := sha256.New()
	h.Write([]byte("shade-dataset-manifest/1\n"))
	var buf [binary.MaxVarintLen64 + 8]byte
	for i, name := range names.AllBytes() {
		// Length-prefixed name then a fixed-width size: no two different
		// lists encode to the same bytes.
		n := binary.PutUvarint(buf[:], uint64(len(name)))
		h.Write(buf[:n])
		h.Write(name)
		binary.BigEndian.PutUint64(buf[:8], uint64(sizes[i]))
		h.Write(buf[:8])
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// Scan builds the manifest of the directory dir, in the order of
// torchvision's ImageFolder:
//
//   - the top level's files first, sorted by name (a flat directory is only
//     these);
//   - then each top-level folder (a class), sorted by name; within a class,
//     every folder reached by a recursive walk, sorted by its whole path
//     (Python's sorted(os.walk(class_dir))), and within each folder its
//     files sorted by name.
//
// Names are compared as Python compares str, which for UTF-8 names is byte
// order (so "a" < "a b" < "a-b" < "a/x": in a class, folder "sub b" comes
// before "sub/deeper"). Names that are not valid UTF-8 are compared as
// Python's surrogateescape decoding would.
//
// Names starting with '.' are skipped at every level, files and folders.
// Only regular files are samples; symbolic links are followed to files and
// folders alike (as os.walk(followlinks=True)), a dangling link is skipped,
// and a link that leads back into a folder being walked, or resolves to
// itself, fails the scan with an error wrapping ErrSymlinkLoop. Any other
// error (an unreadable folder) fails the scan rather than leaving samples
// out silently.
//
// progress, if not nil, is called with the number of files found so far
// every 1000 files and with the total at the end (once, even when the
// total is a multiple of 1000); it runs on the caller's goroutine.
//
// A directory with no samples gives ErrEmpty.
func Scan(dir string, progress func(done int)) (*Manifest, error) {
	s := &scanner{root: filepath.Clean(dir), progress: progress}
	if err := s.scan(); err != nil {
		return nil, err
	}
	if progress != nil && (s.found == 0 || s.found%progressEvery != 0) {
		progress(s.found) // the total, unless the last periodic call gave it
	}
	if s.names.Len() == 0 {
		return nil, fmt.Errorf("%w in %s", ErrEmpty, dir)
	}
	names := s.names.Names()
	return &Manifest{Names: names, Sizes: NewSizes(s.sizes), Version: VersionOf(names, s.sizes)}, nil
}

type scanner struct {
	root     string
	progress func(int)
	found    int
	names    NamesBuilder
	sizes    []int64
}

// entry is one resolved, visible directory entry.
type entry struct {
	name string
	info fs.FileInfo // of the target, for a symbolic link
}

// folder is one walked folder of a class: its path relative to the root
// and its files in order.
type folder struct {
	rel   string
	files []entry
}

func (s *scanner) scan() error {
	rootInfo, err := os.Stat(s.root)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if !rootInfo.IsDir() {
		return fmt.Errorf("dataset: %s is not a directory", s.root)
	}
	files, dirs, err := s.list(s.root)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := s.add(f.name, f.info.Size()); err != nil {
			return err
		}
	}
	ancestors := []fs.FileInfo{rootInfo}
	for _, d := range dirs {
		var folders []folder
		if err := s.walk(d.name, d.info, ancestors, &folders); err != nil {
			return err
		}
		slices.SortFunc(folders, func(a, b folder) int { return pyCompare(a.rel, b.rel) })
		for _, f := range folders {
			for _, e := range f.files {
				if err := s.add(f.rel+"/"+e.name, e.info.Size()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *scanner) add(name string, size int64) error {
	if err := s.names.Add(name); err != nil {
		return err
	}
	s.sizes = append(s.sizes, size)
	return nil
}

// walk collects the folder rel (whose info is info) and every folder below
// it into out, unsorted. ancestors are the folders on the path from the
// root down to rel's parent, for loop detection.
func (s *scanner) walk(rel string, info fs.FileInfo, ancestors []fs.FileInfo, out *[]folder) error {
	path := s.abs(rel)
	for _, a := range ancestors {
		if os.SameFile(a, info) {
			return fmt.Errorf("%w: %s leads back to %s", ErrSymlinkLoop, path, a.Name())
		}
	}
	files, dirs, err := s.list(path)
	if err != nil {
		return err
	}
	*out = append(*out, folder{rel: rel, files: files})
	// Clipped, so this append copies and never overwrites a sibling's chain.
	ancestors = append(slices.Clip(ancestors), info)
	for _, d := range dirs {
		if err := s.walk(rel+"/"+d.name, d.info, ancestors, out); err != nil {
			return err
		}
	}
	return nil
}

// list reads the folder at path and returns its visible regular files and
// folders (following symbolic links), each sorted as Python sorts names.
func (s *scanner) list(path string) (files, dirs []entry, err error) {
	des, err := os.ReadDir(path)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := path + string(os.PathSeparator) + name
		var info fs.FileInfo
		if de.Type()&fs.ModeSymlink != 0 || de.IsDir() {
			info, err = os.Stat(p) // follows links; a folder's info serves loop detection
		} else {
			info, err = de.Info()
		}
		switch {
		case err == nil:
		case errors.Is(err, syscall.ELOOP):
			return nil, nil, fmt.Errorf("%w: %s", ErrSymlinkLoop, p)
		case errors.Is(err, fs.ErrNotExist):
			continue // a dangling link, or removed while we scan
		default:
			return nil, nil, fmt.Errorf("dataset: %w", err)
		}
		switch {
		case info.Mode().IsRegular():
			files = append(files, entry{name, info})
			s.found++
			if s.progress != nil && s.found%progressEvery == 0 {
				s.progress(s.found)
			}
		case info.IsDir():
			dirs = append(dirs, entry{name, info})
		}
	}
	// os.ReadDir sorts by bytes, which is Python's order for UTF-8 names;
	// re-sort only if some name is not valid UTF-8.
	for _, l := range [][]entry{files, dirs} {
		if !slices.IsSortedFunc(l, compareEntries) {
			slices.SortFunc(l, compareEntries)
		}
	}
	return files, dirs, nil
}

func (s *scanner) abs(rel string) string {
	return s.root + string(os.PathSeparator) + filepath.FromSlash(rel)
}

func compareEntries(a, b entry) int { return pyCompare(a.name, b.name) }

// pyCompare orders two file names as Python 3 orders the str values
// os.fsdecode gives them on a UTF-8 system: by code point, where a byte
// that is not part of valid UTF-8 decodes to the lone surrogate U+DC80 +
// (byte - 0x80). For valid UTF-8 this is plain byte order.
func pyCompare(a, b string) int {
	for a != "" && b != "" {
		ra, na := pyDecode(a)
		rb, nb := pyDecode(b)
		if ra != rb {
			if ra < rb {
				return -1
			}
			return 1
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

func pyDecode(s string) (rune, int) {
	if s[0] < utf8.RuneSelf {
		return rune(s[0]), 1
	}
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 {
		return 0xDC00 + rune(s[0]), 1
	}
	return r, n
}
