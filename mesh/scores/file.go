package scores

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/shade-mesh/shade/internal/atomicfile"
)

// Magic starts a saved score file: its first line is Magic and the
// dataset's version, the rest the table's own checked encoding
// (sampling.Table.MarshalBinary).
const Magic = "shade-scores 1 "

// ErrNotScoreFile reports a file that does not start with Magic.
var ErrNotScoreFile = errors.New("scores: not a score file")

// VersionError reports a saved table of another version of the dataset.
type VersionError struct{ Saved string }

func (e *VersionError) Error() string { return "scores: saved table of version " + e.Saved }

// Load installs the table saved at path if it is of version, and returns
// its scored samples among the first n, their scores and the running
// mean. ok is false, with no error, if there is no file; a file of another
// version is a *VersionError and leaves the table as it was.
func (s *Table) Load(path, version string, n int) (ids []uint32, scores []float64, mean float64, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, 0, false, nil
	}
	if err != nil {
		return nil, nil, 0, false, err
	}
	header, body, found := bytes.Cut(b, []byte("\n"))
	if !found || !bytes.HasPrefix(header, []byte(Magic)) {
		return nil, nil, 0, false, ErrNotScoreFile
	}
	if v := string(header[len(Magic):]); v != version {
		return nil, nil, 0, false, &VersionError{Saved: v}
	}
	ids, scores, mean, err = s.LoadSaved(body, n)
	return ids, scores, mean, err == nil, err
}

// Save writes the table of version to path if it changed since the last
// save: to a temporary file renamed into place, so a crash leaves the old
// file or the new one, never a torn one.
func (s *Table) Save(path, version string) error {
	body, ok, err := s.UnsavedTable()
	if !ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("scores: %w", err)
	}
	return atomicfile.Write(path, append([]byte(Magic+version+"\n"), body...), 0o600)
}
