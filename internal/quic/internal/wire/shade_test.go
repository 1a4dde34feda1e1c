package wire

import (
	"testing"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
)

// TestMaxDataLenFitsLargePackets checks, for every packet size up to the
// largest send, that a frame carrying MaxDataLen bytes fits in that size
// and wastes at most 3 bytes of it. Upstream's packets never exceeded
// 1,452 bytes, so a length varint of more than 2 bytes was never needed;
// above 16 KiB it takes 4, and a frame 2 bytes too long broke the
// connection ("PacketPacker BUG: packet too large").
func TestMaxDataLenFitsLargePackets(t *testing.T) {
	data := make([]byte, protocol.MaxLargePacketBufferSize)
	check := func(t *testing.T, kind string, maxSize, n, length protocol.ByteCount) {
		t.Helper()
		if n == 0 {
			return
		}
		if length > maxSize || length < maxSize-3 {
			t.Fatalf("%s: room %d, %d data bytes make a frame of %d", kind, maxSize, n, length)
		}
	}
	for _, offset := range []protocol.ByteCount{0, 1 << 40} {
		for _, id := range []protocol.StreamID{4, 1 << 40} {
			for maxSize := protocol.ByteCount(1); maxSize <= protocol.MaxLargePacketBufferSize; maxSize++ {
				sf := &StreamFrame{StreamID: id, Offset: offset, DataLenPresent: true}
				n := sf.MaxDataLen(maxSize, protocol.Version1)
				sf.Data = data[:n]
				check(t, "stream", maxSize, n, sf.Length(protocol.Version1))
			}
		}
		for maxSize := protocol.ByteCount(1); maxSize <= protocol.MaxLargePacketBufferSize; maxSize++ {
			cf := &CryptoFrame{Offset: offset}
			n := cf.MaxDataLen(maxSize)
			cf.Data = data[:n]
			check(t, "crypto", maxSize, n, cf.Length(protocol.Version1))
		}
	}
	for maxSize := protocol.ByteCount(1); maxSize <= protocol.MaxLargePacketBufferSize; maxSize++ {
		df := &DatagramFrame{DataLenPresent: true}
		n := df.MaxDataLen(maxSize, protocol.Version1)
		df.Data = data[:n]
		check(t, "datagram", maxSize, n, df.Length(protocol.Version1))
	}
}

// TestSplitStreamFrameForLargePackets splits a STREAM frame of the largest
// size a send stream queues (MaxPacketBufferSize) the way the packer does,
// for packet sizes between upstream's cap and ours, and checks each part's
// encoding is no larger than its room and parses back to the same bytes.
func TestSplitStreamFrameForLargePackets(t *testing.T) {
	data := make([]byte, protocol.MaxPacketBufferSize)
	for i := range data {
		data[i] = byte(i * 31)
	}
	for maxSize := protocol.ByteCount(1400); maxSize < protocol.MaxPacketBufferSize; maxSize += 7 {
		f := &StreamFrame{StreamID: 8, Offset: 1 << 20, DataLenPresent: true, Data: append([]byte(nil), data...)}
		part, split := f.MaybeSplitOffFrame(maxSize, protocol.Version1)
		if !split || part == nil {
			t.Fatalf("room %d: frame of %d bytes not split", maxSize, f.Length(protocol.Version1))
		}
		b, err := part.Append(nil, protocol.Version1)
		if err != nil {
			t.Fatal(err)
		}
		if protocol.ByteCount(len(b)) > maxSize || protocol.ByteCount(len(b)) != part.Length(protocol.Version1) {
			t.Fatalf("room %d: part encodes to %d bytes, Length says %d", maxSize, len(b), part.Length(protocol.Version1))
		}
		got, l, err := ParseStreamFrame(b[1:], FrameType(b[0]), protocol.Version1)
		if err != nil || l != len(b)-1 {
			t.Fatalf("room %d: parse: %v (%d of %d bytes)", maxSize, err, l, len(b)-1)
		}
		if got.Offset != 1<<20 || string(got.Data) != string(data[:len(got.Data)]) || len(got.Data) != len(part.Data) {
			t.Fatalf("room %d: parsed %d bytes at %d, want %d at %d", maxSize, len(got.Data), got.Offset, len(part.Data), 1<<20)
		}
		if string(f.Data) != string(data[len(part.Data):]) || f.Offset != 1<<20+protocol.ByteCount(len(part.Data)) {
			t.Fatalf("room %d: the rest is not what follows the part", maxSize)
		}
	}
}

// TestReceivedFramePinsLittle checks that a received STREAM frame holds a
// buffer of the smallest pool its data fits in (upstream's packet size, a
// jumbo frame's, or the raised MaxPacketBufferSize), not one of the
// largest, and that every kind goes back to its pool.
func TestReceivedFramePinsLittle(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{protocol.MinStreamFrameBufferSize, smallFrameSize},
		{200, smallFrameSize},
		{smallFrameSize, smallFrameSize},
		{smallFrameSize + 1, protocol.JumboPacketSize},
		{protocol.JumboPacketSize, protocol.JumboPacketSize},
		{protocol.JumboPacketSize + 1, protocol.MaxPacketBufferSize},
		{protocol.MaxPacketBufferSize - 16, protocol.MaxPacketBufferSize},
	} {
		f := &StreamFrame{StreamID: 4, Offset: 99, DataLenPresent: true, Data: make([]byte, tc.n)}
		b, err := f.Append(nil, protocol.Version1)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := ParseStreamFrame(b[1:], FrameType(b[0]), protocol.Version1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Data) != tc.n || cap(got.Data) != tc.want {
			t.Fatalf("%d data bytes parsed into a buffer of %d/%d, want %d/%d", tc.n, len(got.Data), cap(got.Data), tc.n, tc.want)
		}
		got.PutBack()
	}
}

// TestSplitFrameKeepsSmallBuffer checks that the rest of a split frame
// goes into a buffer sized by the rest, not one of the largest.
func TestSplitFrameKeepsSmallBuffer(t *testing.T) {
	f := GetStreamFrameFor(protocol.JumboPacketSize)
	f.StreamID, f.Offset, f.DataLenPresent = 4, 0, true
	f.Data = f.Data[:protocol.JumboPacketSize]
	for i := range f.Data {
		f.Data[i] = byte(i)
	}
	first, split := f.MaybeSplitOffFrame(protocol.JumboPacketSize-1000, protocol.Version1)
	if !split || first == nil {
		t.Fatal("frame not split")
	}
	n := len(first.Data)
	if cap(f.Data) != smallFrameSize || int(f.Offset) != n || len(f.Data) != protocol.JumboPacketSize-n {
		t.Fatalf("rest: offset %d, %d bytes in a buffer of %d; want offset %d, %d bytes in %d",
			f.Offset, len(f.Data), cap(f.Data), n, protocol.JumboPacketSize-n, smallFrameSize)
	}
	for i, c := range f.Data {
		if c != byte(n+i) {
			t.Fatalf("rest byte %d is %d, want %d", i, c, byte(n+i))
		}
	}
	first.PutBack()
	f.PutBack()
}

// TestParseStreamFrameInPlace checks that a large STREAM frame keeps its
// data in the packet when keep accepts it, and is copied otherwise: keep
// is asked once, with the data's length; the frame's bytes are the
// packet's; putting the frame back calls keep's function once, and a
// copied frame never calls keep's function at all.
func TestParseStreamFrameInPlace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		decline bool
		inPlace bool
	}{
		{"large", 8000, false, true},
		{"just above the small pool", smallFrameSize + 1, false, true},
		{"small pool size", smallFrameSize, false, false},
		{"declined", 8000, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, tc.n)
			for i := range data {
				data[i] = byte(i * 7)
			}
			sent := &StreamFrame{StreamID: 4, Offset: 1 << 20, DataLenPresent: true, Data: data}
			packet, typ, l := streamFramePacket(t, sent)
			asked, released := 0, 0
			keep := func(n int) func() {
				asked++
				if n != tc.n {
					t.Errorf("keep asked for %d bytes, the frame has %d", n, tc.n)
				}
				if tc.decline {
					return nil
				}
				return func() { released++ }
			}
			f, used, err := ParseStreamFrameInPlace(packet[l:], typ, protocol.Version1, keep)
			if err != nil {
				t.Fatal(err)
			}
			if used != len(packet)-l || f.Offset != sent.Offset || f.StreamID != sent.StreamID || string(f.Data) != string(data) {
				t.Fatalf("parsed %d of %d bytes, offset %d, stream %d, data intact %v", used, len(packet)-l, f.Offset, f.StreamID, string(f.Data) == string(data))
			}
			inPlace := &f.Data[0] == &packet[len(packet)-tc.n]
			if inPlace != tc.inPlace {
				t.Fatalf("data in the packet: %v, want %v", inPlace, tc.inPlace)
			}
			if want := 0; tc.n > smallFrameSize {
				want = 1
				if asked != want {
					t.Fatalf("keep asked %d times, want %d", asked, want)
				}
			} else if asked != 0 {
				t.Fatalf("keep asked for a frame of %d bytes", tc.n)
			}
			if released != 0 {
				t.Fatal("released before the frame was put back")
			}
			f.PutBack()
			if want := map[bool]int{true: 1, false: 0}[tc.inPlace]; released != want {
				t.Fatalf("released %d times after PutBack, want %d", released, want)
			}
		})
	}
}

// TestParseStreamFrameOverflowBeforeKeep: a frame whose data would run
// past the largest stream offset is refused before keep is asked, copied
// or in place.
func TestParseStreamFrameOverflowBeforeKeep(t *testing.T) {
	for _, n := range []int{100, 8000} {
		f := &StreamFrame{StreamID: 4, Offset: protocol.MaxByteCount - 10, DataLenPresent: true, Data: make([]byte, n)}
		packet, typ, l := streamFramePacket(t, f)
		asked := false
		_, _, err := ParseStreamFrameInPlace(packet[l:], typ, protocol.Version1, func(int) func() { asked = true; return func() {} })
		if err == nil || asked {
			t.Fatalf("%d bytes past the largest offset: error %v, keep asked %v", n, err, asked)
		}
	}
}

// streamFramePacket encodes f as a 1-RTT packet's payload and parses its
// type, as a receiver does before it parses the frame: the payload, the
// type and the type's length.
func streamFramePacket(t *testing.T, f *StreamFrame) ([]byte, FrameType, int) {
	t.Helper()
	packet, err := f.Append(nil, protocol.Version1)
	if err != nil {
		t.Fatal(err)
	}
	typ, l, err := NewFrameParser(true, true, true).ParseType(packet, protocol.Encryption1RTT)
	if err != nil {
		t.Fatal(err)
	}
	return packet, typ, l
}
