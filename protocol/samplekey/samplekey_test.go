package samplekey

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen)
	for _, tc := range []struct {
		key   string
		name  string
		index int
		ok    bool
	}{
		{"ds/0", "ds", 0, true},
		{"ds/1", "ds", 1, true},
		{"fashion-mnist.train_v2/59999", "fashion-mnist.train_v2", 59999, true},
		{"ds/2147483647", "ds", 2147483647, true},
		{long + "/7", long, 7, true},
		{"a/9", "a", 9, true},
		{"...x/3", "...x", 3, true},
		{"-/3", "-", 3, true},

		{"ds/-1", "", 0, false},
		{"ds/+1", "", 0, false},
		{"ds/01", "", 0, false},
		{"ds/00", "", 0, false},
		{"ds/1x", "", 0, false},
		{"ds/x1", "", 0, false},
		{"ds/1 ", "", 0, false},
		{"ds/ 1", "", 0, false},
		{"ds/1.0", "", 0, false},
		{"ds/1e3", "", 0, false},
		{"ds/0x10", "", 0, false},
		{"ds/\u0661", "", 0, false}, // ARABIC-INDIC DIGIT ONE
		{"/1", "", 0, false},
		{"ds/", "", 0, false},
		{"ds", "", 0, false},
		{"", "", 0, false},
		{"/", "", 0, false},
		{"a/b/1", "", 0, false},
		{"ds//1", "", 0, false},
		{"ds/1/", "", 0, false},
		{"ds/2147483648", "", 0, false},
		{"ds/4294967296", "", 0, false},
		{"ds/99999999999999999999999", "", 0, false},
		{long + "n/7", "", 0, false},
		{"d s/1", "", 0, false},
		{"d\x00s/1", "", 0, false},
		{"caf\u00e9/1", "", 0, false},
		{"./1", "", 0, false},
		{"../1", "", 0, false},
	} {
		name, index, err := Parse(tc.key)
		if tc.ok {
			if err != nil || name != tc.name || index != tc.index {
				t.Errorf("Parse(%q) = %q, %d, %v; want %q, %d", tc.key, name, index, err, tc.name, tc.index)
			}
			if got := Format(name, index); got != tc.key {
				t.Errorf("Format(%q, %d) = %q, want %q", name, index, got, tc.key)
			}
			continue
		}
		if !errors.Is(err, ErrBadKey) {
			t.Errorf("Parse(%q) = %q, %d, %v; want ErrBadKey", tc.key, name, index, err)
		}
		if name != "" || index != 0 {
			t.Errorf("Parse(%q) returned %q, %d with an error", tc.key, name, index)
		}
	}
}

func TestParseErrorIsShort(t *testing.T) {
	_, _, err := Parse("ds/" + strings.Repeat("9", 1<<20))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("error for a huge key is %d bytes", len(err.Error()))
	}
}

func TestValidName(t *testing.T) {
	for _, name := range []string{"a", "Z", "0", "fashion-mnist", "train.v1", "a_b", strings.Repeat("x", 64), "..."} {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", strings.Repeat("x", 65), "a/b", "a b", "a:b", "\u00e9", "a\n", "*"} {
		if err := ValidName(name); !errors.Is(err, ErrBadName) {
			t.Errorf("ValidName(%q) = %v, want ErrBadName", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, k := range []string{"ds/0", "ds/-1", "ds/01", "a/b/1", "/1", "ds/", "ds/2147483648", "x.y_z-1/123"} {
		f.Add(k, "ds", int64(1))
	}
	f.Add("", "", int64(-1))
	f.Add("..", "..", int64(2147483647))
	f.Fuzz(func(t *testing.T, key, name string, index int64) {
		// Any key: no panic, and a parsed key is canonical.
		if n, i, err := Parse(key); err == nil {
			if ValidName(n) != nil || i < 0 || i > MaxIndex {
				t.Fatalf("Parse(%q) accepted %q, %d", key, n, i)
			}
			if Format(n, i) != key {
				t.Fatalf("Parse(%q) = %q, %d, which is not canonical", key, n, i)
			}
		} else if !errors.Is(err, ErrBadKey) {
			t.Fatalf("Parse(%q) error %v does not wrap ErrBadKey", key, err)
		}

		// The []byte forms agree with the string forms.
		d, x, ok := Split(key)
		db, xb, okb := Split([]byte(key))
		if ok != okb || d != string(db) || x != string(xb) {
			t.Fatalf("Split(%q) = %q, %q, %v; of its bytes %q, %q, %v", key, d, x, ok, db, xb, okb)
		}
		i1, ok1 := ParseIndex(x)
		i2, ok2 := ParseIndex(xb)
		if i1 != i2 || ok1 != ok2 {
			t.Fatalf("ParseIndex(%q) = %d, %v; of its bytes %d, %v", x, i1, ok1, i2, ok2)
		}

		// Any valid name and index round-trips.
		if ValidName(name) != nil || index < 0 || index > MaxIndex {
			return
		}
		k := name + "/" + strconv.FormatInt(index, 10)
		n, i, err := Parse(k)
		if err != nil || n != name || int64(i) != index {
			t.Fatalf("Parse(%q) = %q, %d, %v; want %q, %d", k, n, i, err, name, index)
		}
	})
}

func TestFormatAndAppend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index int
		key   string
	}{
		{"ds", 0, "ds/0"},
		{"fashion-mnist", 59999, "fashion-mnist/59999"},
		{"ds", MaxIndex, "ds/2147483647"},
		{"ds", -1, "ds/-1"}, // not validated: the peer answers such a key with an error
	} {
		if got := Format(tc.name, tc.index); got != tc.key {
			t.Errorf("Format(%q, %d) = %q, want %q", tc.name, tc.index, got, tc.key)
		}
		if got := string(Append([]byte("x:"), tc.name, tc.index)); got != "x:"+tc.key {
			t.Errorf("Append(%q, %d) = %q, want %q", tc.name, tc.index, got, "x:"+tc.key)
		}
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		key, dataset, index string
		ok                  bool
	}{
		{"ds/7", "ds", "7", true},
		{"a/b/1", "a/b", "1", true}, // the last '/'; "a/b" is no valid name
		{"ds/", "ds", "", true},
		{"/1", "", "", false},
		{"ds", "", "", false},
		{"", "", "", false},
	} {
		d, x, ok := Split([]byte(tc.key))
		if string(d) != tc.dataset || string(x) != tc.index || ok != tc.ok {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", tc.key, d, x, ok, tc.dataset, tc.index, tc.ok)
		}
	}
}

func BenchmarkSplitParseIndex(b *testing.B) {
	key := []byte("fashion-mnist/59999")
	b.ReportAllocs()
	for b.Loop() {
		_, x, _ := Split(key)
		if _, ok := ParseIndex(x); !ok {
			b.Fatal("not parsed")
		}
	}
}
