package s3source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Listing a prefix through the getter: ListObjectsV2 requests signed here
// and their answers read by listPage, not by minio-go, whose decoding
// (encoding/xml, into a struct an object with its owner, which it always
// asks for) was most of the client's CPU in a listing: about 27 us an
// object, 27 s of CPU for 1,000,000 objects (BenchmarkOpen). Only a
// whole, well-formed page of a 200 answer is read here; any other answer
// (an error, a redirect, a page not as expected) ends the run, and the
// prefix is listed again through minio-go, which reports the store's
// error or copes with what it sent.

// errPage says that a page was not read here (its answer, or its form).
var errPage = errors.New("s3source: a listing page not read by the getter")

// listEntry is one key of a page, or a folder (a common prefix of a
// one-level listing, its key ending in "/").
type listEntry struct {
	key  string
	size int64
	etag string
}

// list sends the ListObjectsV2 requests of prefix (one level, with "/" as
// the delimiter, where oneLevel) and gives each entry of each page to each,
// in the store's order.
func (g *getter) list(ctx context.Context, prefix string, oneLevel bool, each func(listEntry) error) error {
	token := ""
	for {
		q := url.Values{"list-type": {"2"}, "encoding-type": {"url"}, "prefix": {prefix}}
		if oneLevel {
			q.Set("delimiter", "/")
		}
		if token != "" {
			q.Set("continuation-token", token)
		}
		page, err := g.listPage(ctx, s3utils.QueryEncode(q))
		if err != nil {
			return err
		}
		next, truncated, err := readPage(page, each)
		if err != nil {
			return err
		}
		if !truncated {
			return nil
		}
		if next == "" || next == token {
			return fmt.Errorf("%w: truncated, with no new continuation token", errPage)
		}
		token = next
	}
}

// listPage sends one ListObjectsV2 request of the query (in the order and
// escapes SigV4 signs it in: s3utils.QueryEncode) and returns its
// answer's body, where the store answered 200.
func (g *getter) listPage(ctx context.Context, query string) ([]byte, error) {
	v, err := g.client.GetCreds()
	if err != nil {
		return nil, err
	}
	path := g.path + "/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+path+"?"+query, nil)
	if err != nil {
		return nil, err
	}
	g.sign(req, path, query, v, time.Now().UTC())
	resp, err := g.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s", errPage, resp.Status)
	}
	// A page of 1,000 keys is some 300 KB; 64 MiB is a bound, not a size.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	return body, nil
}

// readPage reads a ListBucketResult page: it gives each key (Contents)
// and folder (CommonPrefixes) to each, in the page's order, and returns
// whether the listing goes on and from which token. Keys and prefixes are
// URL-encoded where the page says so (EncodingType url).
func readPage(page []byte, each func(listEntry) error) (next string, truncated bool, err error) {
	body, ok := element(page, "ListBucketResult")
	if !ok {
		return "", false, fmt.Errorf("%w: no ListBucketResult", errPage)
	}
	encoded := false
	var entries []listEntry
	for len(body) > 0 {
		name, content, rest, ok := child(body)
		if !ok {
			return "", false, fmt.Errorf("%w: malformed", errPage)
		}
		body = rest
		switch string(name) {
		case "Contents":
			var e listEntry
			for len(content) > 0 {
				n, c, r, ok := child(content)
				if !ok {
					return "", false, fmt.Errorf("%w: malformed Contents", errPage)
				}
				content = r
				switch string(n) {
				case "Key":
					e.key = string(c)
				case "ETag":
					e.etag = etagOf(c)
				case "Size":
					if e.size, ok = sizeOf(c); !ok {
						return "", false, fmt.Errorf("%w: size %q", errPage, c)
					}
				}
			}
			if e.key == "" {
				return "", false, fmt.Errorf("%w: Contents without a Key", errPage)
			}
			entries = append(entries, e)
		case "CommonPrefixes":
			n, c, _, ok := child(content)
			if !ok || string(n) != "Prefix" {
				return "", false, fmt.Errorf("%w: CommonPrefixes without a Prefix", errPage)
			}
			entries = append(entries, listEntry{key: string(c)})
		case "IsTruncated":
			truncated = string(content) == "true"
		case "NextContinuationToken":
			next = html.UnescapeString(string(content))
		case "EncodingType":
			encoded = string(content) == "url"
		}
	}
	for _, e := range entries {
		// The escapes of XML first, then the URL's (a key's '%' is %25)
		// where the page says it used them, as minio-go decodes: some
		// stores answer keys as they are.
		e.key = html.UnescapeString(e.key)
		if encoded {
			if e.key, err = url.QueryUnescape(e.key); err != nil {
				return "", false, fmt.Errorf("%w: key: %w", errPage, err)
			}
		}
		if err := each(e); err != nil {
			return "", false, err
		}
	}
	return next, truncated, nil
}

// element returns the content of the document's element name, past an
// XML declaration; ok is false where it is not the document's element.
func element(doc []byte, name string) ([]byte, bool) {
	doc = bytes.TrimSpace(doc)
	if bytes.HasPrefix(doc, []byte("<?xml")) {
		end := bytes.Index(doc, []byte("?>"))
		if end < 0 {
			return nil, false
		}
		doc = bytes.TrimSpace(doc[end+2:])
	}
	open := "<" + name
	if !bytes.HasPrefix(doc, []byte(open)) || len(doc) == len(open) || (doc[len(open)] != '>' && doc[len(open)] != ' ') {
		return nil, false
	}
	gt := bytes.IndexByte(doc, '>')
	closing := "</" + name + ">"
	if !bytes.HasSuffix(doc, []byte(closing)) || gt+1 > len(doc)-len(closing) {
		return nil, false
	}
	return doc[gt+1 : len(doc)-len(closing)], true
}

// child splits the first child element off b (spaces around it
// skipped): its name, content and what follows. An element of no content
// may be written <Name/>. ok is false where b does not begin with one
// (text, a comment, attributes, a CDATA section, an unclosed element).
func child(b []byte) (name, content, rest []byte, ok bool) {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) < 3 || b[0] != '<' {
		return nil, nil, nil, false
	}
	gt := bytes.IndexByte(b, '>')
	if gt < 0 {
		return nil, nil, nil, false
	}
	tag := b[1:gt]
	if bytes.HasSuffix(tag, []byte("/")) {
		tag = tag[:len(tag)-1]
		if !isName(tag) {
			return nil, nil, nil, false
		}
		return tag, nil, bytes.TrimLeft(b[gt+1:], " \t\r\n"), true
	}
	if !isName(tag) {
		return nil, nil, nil, false
	}
	// The first "</tag>" after it.
	end := gt + 1
	for {
		i := bytes.Index(b[end:], []byte("</"))
		if i < 0 {
			return nil, nil, nil, false
		}
		end += i
		if after := b[end+2:]; bytes.HasPrefix(after, tag) && len(after) > len(tag) && after[len(tag)] == '>' {
			break
		}
		end += 2
	}
	content = b[gt+1 : end]
	if bytes.Contains(content, []byte("<![CDATA[")) || bytes.Contains(content, []byte("<!--")) {
		return nil, nil, nil, false
	}
	return tag, content, bytes.TrimLeft(b[end+len(tag)+3:], " \t\r\n"), true
}

// etagOf is an ETag element's content as minio-go reads it: its XML
// escapes read and the quotes around it trimmed. Stores write it
// "&quot;hex&quot;"; the quotes are trimmed from the bytes, and
// html.UnescapeString makes a string of what is left only where an
// escape is left.
func etagOf(c []byte) string {
	for {
		switch {
		case bytes.HasPrefix(c, []byte("&quot;")):
			c = c[len("&quot;"):]
		case bytes.HasPrefix(c, []byte(`"`)):
			c = c[1:]
		case bytes.HasSuffix(c, []byte("&quot;")):
			c = c[:len(c)-len("&quot;")]
		case bytes.HasSuffix(c, []byte(`"`)):
			c = c[:len(c)-1]
		case bytes.IndexByte(c, '&') >= 0:
			return strings.Trim(html.UnescapeString(string(c)), `"`)
		default:
			return string(c)
		}
	}
}

// sizeOf is a Size element's content, a number of bytes; ok is false
// where it is not one strconv.ParseInt reads as 0 or more.
func sizeOf(c []byte) (int64, bool) {
	digits := len(c) > 0 && len(c) <= 18
	var n int64 // at most 18 digits: no overflow
	for _, d := range c {
		digits = digits && '0' <= d && d <= '9'
		n = n*10 + int64(d-'0')
	}
	if digits {
		return n, true
	}
	n, err := strconv.ParseInt(string(c), 10, 64)
	return n, err == nil && n >= 0
}

// isName reports whether b is an element name of letters and digits
// alone (every one of a listing's).
func isName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
