package wire

import (
	"bytes"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/transport/peer"
)

// An offer carries samples an owner read from the source to a co-owner,
// up to 4 MiB a request. Encoded by reflection into one frame and decoded
// by reflection, each sample was copied four times on its way from the
// owner's source buffer to the co-owner's cache: into the frame, into the
// stream, out of the stream into the request's buffer, and out of that
// into a slice of its own (allocated and cleared first). Parts and
// DecodeOfferReq take two of those copies away: the samples go to the
// stream as they lie, and the co-owner admits them from the request's
// buffer. The bytes on the wire are exactly the reflection's, so peers of
// either kind read each other (TestOfferCodecMatchesReflection).

// Parts encodes r as msgpack's reflection encodes it, byte for byte, in
// parts for peer.Node.Call: each item's Value a part of its own, as it
// lies (never copied), between parts that hold the rest.
func (r *OfferReq) Parts() (peer.Encoded, error) {
	var head bytes.Buffer
	enc := msgpack.NewEncoder(&head)
	cuts := make([]int, 0, len(r.Items)) // where each Value goes in head
	err := enc.EncodeMapLen(1)
	err = keyed(enc, err, "o", func() error {
		if r.Items == nil {
			return enc.EncodeNil()
		}
		err := enc.EncodeArrayLen(len(r.Items))
		for i := range r.Items {
			it := &r.Items[i]
			fields := 5
			if it.Leaving {
				fields++
			}
			if err == nil {
				err = enc.EncodeMapLen(fields)
			}
			err = keyed(enc, err, "d", func() error { return enc.EncodeString(it.Dataset) })
			err = keyed(enc, err, "v", func() error { return enc.EncodeString(it.Version) })
			err = keyed(enc, err, "i", func() error { return enc.EncodeUint32(it.ID) })
			err = keyed(enc, err, "s", func() error { return enc.EncodeUint64(it.Sum) })
			err = keyed(enc, err, "b", func() error {
				if it.Value == nil {
					return enc.EncodeNil()
				}
				return enc.EncodeBytesLen(len(it.Value))
			})
			cuts = append(cuts, head.Len())
			if it.Leaving {
				err = keyed(enc, err, "l", func() error { return enc.EncodeBool(true) })
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wire: offer request: %w", err)
	}
	b := head.Bytes()
	parts := make(peer.Encoded, 0, 2*len(cuts)+1)
	prev := 0
	for i, cut := range cuts {
		parts = append(parts, b[prev:cut], r.Items[i].Value)
		prev = cut
	}
	return append(parts, b[prev:]), nil
}

// DecodeOfferReq decodes body, an OfferReq as msgpack encodes it, into r
// as msgpack's reflection would, except that each item's Value is the
// slice of body it lies in, not a copy: r's values are valid while body
// is and change with it. Keys come in any order; unknown ones are
// skipped; a field of the wrong type is an error that names it.
func DecodeOfferReq(body []byte, r *OfferReq) error {
	*r = OfferReq{}
	br := bytes.NewReader(body)
	dec := msgpack.NewDecoder(br) // reads br as it is, with no buffer of its own
	return decodeMap(dec, "offer request", func(key string) error {
		if key != "o" {
			return dec.Skip()
		}
		var err error
		r.Items, err = decodeArray(dec, func(it *OfferItem) error {
			return decodeMap(dec, "offer item", func(key string) (err error) {
				switch key {
				case "d":
					it.Dataset, err = dec.DecodeString()
				case "v":
					it.Version, err = dec.DecodeString()
				case "i":
					it.ID, err = dec.DecodeUint32()
				case "s":
					it.Sum, err = dec.DecodeUint64()
				case "b":
					it.Value, err = bytesIn(dec, br, body)
				case "l":
					it.Leaving, err = dec.DecodeBool()
				default:
					err = dec.Skip()
				}
				return err
			})
		})
		return err
	})
}

// bytesIn decodes a bin (or a str, as msgpack decodes a []byte) that dec
// reads from br, a reader of body, as the slice of body that holds it;
// nil for nil.
func bytesIn(dec *msgpack.Decoder, br *bytes.Reader, body []byte) ([]byte, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil || n < 0 {
		return nil, err
	}
	if n > br.Len() {
		return nil, io.ErrUnexpectedEOF
	}
	at := len(body) - br.Len()
	if _, err := br.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return body[at : at+n : at+n], nil
}
