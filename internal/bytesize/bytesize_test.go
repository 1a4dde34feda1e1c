package bytesize

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"4096", 4096}, {"1KiB", 1024}, {"2GiB", 2 << 30}, {"2gib", 2 << 30},
		{"512MiB", 512 << 20}, {"1.5GiB", 3 << 29}, {"1GB", 1e9}, {"10kb", 10000},
		{"4k", 4096}, {"1M", 1 << 20}, {" 8 MiB ", 8 << 20}, {"100B", 100},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1", "1XB", "abc", "NaN", "1e30TiB"} {
		if _, err := Parse(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) error = %v; want ErrSyntax", bad, err)
		}
	}
}

func TestFormat(t *testing.T) {
	cases := map[int64]string{0: "0B", 1023: "1023B", 1024: "1KiB", 1536: "1.5KiB", 2 << 30: "2GiB", 5 << 40: "5TiB"}
	for n, want := range cases {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q; want %q", n, got, want)
		}
	}
}
