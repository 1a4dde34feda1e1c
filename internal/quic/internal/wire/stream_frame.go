package wire

import (
	"errors"
	"io"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
	"github.com/shade-mesh/shade/internal/quic/quicvarint"
)

// A StreamFrame of QUIC
type StreamFrame struct {
	StreamID       protocol.StreamID
	Offset         protocol.ByteCount
	Data           []byte
	Fin            bool
	DataLenPresent bool

	fromPool bool
	// shade: release, if set, lets go of the packet buffer Data lies in
	// (see ParseStreamFrameInPlace); PutBack calls it.
	release func()
}

func ParseStreamFrame(b []byte, typ FrameType, v protocol.Version) (*StreamFrame, int, error) {
	return ParseStreamFrameInPlace(b, typ, v, nil)
}

// shade: ParseStreamFrameInPlace is ParseStreamFrame, except that a frame
// of more than smallFrameSize (1,452) bytes of data may keep its data in b
// instead of a copy: keep (if not nil) is asked with the data's length,
// and if it returns a function the frame's Data is the bytes in b and that
// function is called when the frame is put back (the frame sorter does so
// once the stream's reader has consumed the data). keep must hold b's
// buffer from reuse until then, and should decline (return nil) where the
// frame is too small a part of the buffer to pin it. Smaller frames, and
// those keep declines, are copied as before.
func ParseStreamFrameInPlace(b []byte, typ FrameType, _ protocol.Version, keep func(n int) func()) (*StreamFrame, int, error) {
	startLen := len(b)
	hasOffset := typ&0b100 > 0
	fin := typ&0b1 > 0
	hasDataLen := typ&0b10 > 0

	streamID, l, err := quicvarint.Parse(b)
	if err != nil {
		return nil, 0, replaceUnexpectedEOF(err)
	}
	b = b[l:]
	var offset uint64
	if hasOffset {
		offset, l, err = quicvarint.Parse(b)
		if err != nil {
			return nil, 0, replaceUnexpectedEOF(err)
		}
		b = b[l:]
	}

	var dataLen uint64
	if hasDataLen {
		var err error
		var l int
		dataLen, l, err = quicvarint.Parse(b)
		if err != nil {
			return nil, 0, replaceUnexpectedEOF(err)
		}
		b = b[l:]
		if dataLen > uint64(len(b)) {
			return nil, 0, io.EOF
		}
	} else {
		// The rest of the packet is data
		dataLen = uint64(len(b))
	}

	// shade: checked here, before a pooled frame is taken or keep asked
	// (upstream checked the frame after the copy).
	if offset+dataLen > uint64(protocol.MaxByteCount) {
		return nil, 0, errors.New("stream data overflows maximum offset")
	}
	var frame *StreamFrame
	if keep != nil && dataLen > smallFrameSize { // shade: in place
		if release := keep(int(dataLen)); release != nil {
			frame = &StreamFrame{
				StreamID:       protocol.StreamID(streamID),
				Offset:         protocol.ByteCount(offset),
				Data:           b[:dataLen:dataLen],
				Fin:            fin,
				DataLenPresent: hasDataLen,
				release:        release,
			}
			return frame, startLen - len(b) + int(dataLen), nil
		}
	}
	if dataLen < protocol.MinStreamFrameBufferSize {
		frame = &StreamFrame{}
		if dataLen > 0 {
			frame.Data = make([]byte, dataLen)
		}
	} else {
		frame = GetStreamFrameFor(dataLen) // shade: from the smallest pool where it fits
		// The STREAM frame can't be larger than the StreamFrame we obtained from the buffer,
		// since those StreamFrames have a buffer length of the maximum packet size.
		if dataLen > uint64(cap(frame.Data)) {
			return nil, 0, io.EOF
		}
		frame.Data = frame.Data[:dataLen]
	}

	frame.StreamID = protocol.StreamID(streamID)
	frame.Offset = protocol.ByteCount(offset)
	frame.Fin = fin
	frame.DataLenPresent = hasDataLen

	if dataLen > 0 {
		copy(frame.Data, b)
	}
	return frame, startLen - len(b) + int(dataLen), nil
}

func (f *StreamFrame) Append(b []byte, _ protocol.Version) ([]byte, error) {
	if len(f.Data) == 0 && !f.Fin {
		return nil, errors.New("StreamFrame: attempting to write empty frame without FIN")
	}

	typ := byte(0x8)
	if f.Fin {
		typ ^= 0b1
	}
	hasOffset := f.Offset != 0
	if f.DataLenPresent {
		typ ^= 0b10
	}
	if hasOffset {
		typ ^= 0b100
	}
	b = append(b, typ)
	b = quicvarint.Append(b, uint64(f.StreamID))
	if hasOffset {
		b = quicvarint.Append(b, uint64(f.Offset))
	}
	if f.DataLenPresent {
		b = quicvarint.Append(b, uint64(f.DataLen()))
	}
	b = append(b, f.Data...)
	return b, nil
}

// Length returns the total length of the STREAM frame
func (f *StreamFrame) Length(protocol.Version) protocol.ByteCount {
	length := 1 + quicvarint.Len(uint64(f.StreamID))
	if f.Offset != 0 {
		length += quicvarint.Len(uint64(f.Offset))
	}
	if f.DataLenPresent {
		length += quicvarint.Len(uint64(f.DataLen()))
	}
	return protocol.ByteCount(length) + f.DataLen()
}

// DataLen gives the length of data in bytes
func (f *StreamFrame) DataLen() protocol.ByteCount {
	return protocol.ByteCount(len(f.Data))
}

// MaxDataLen returns the maximum data length
// If 0 is returned, writing will fail (a STREAM frame must contain at least 1 byte of data).
func (f *StreamFrame) MaxDataLen(maxSize protocol.ByteCount, _ protocol.Version) protocol.ByteCount {
	headerLen := 1 + protocol.ByteCount(quicvarint.Len(uint64(f.StreamID)))
	if f.Offset != 0 {
		headerLen += protocol.ByteCount(quicvarint.Len(uint64(f.Offset)))
	}
	if f.DataLenPresent {
		// Pretend that the data size will be 1 byte.
		// If it turns out that varint encoding the length will consume 2 bytes, we need to adjust the data length afterward
		headerLen++
	}
	if headerLen > maxSize {
		return 0
	}
	maxDataLen := maxSize - headerLen
	if f.DataLenPresent && quicvarint.Len(uint64(maxDataLen)) != 1 {
		// shade: upstream took 1 byte off, enough for a 2-byte length; a
		// length of 16,384 or more takes 4 (packets above 16 KiB).
		maxDataLen -= protocol.ByteCount(quicvarint.Len(uint64(maxDataLen)) - 1)
	}
	return maxDataLen
}

// MaybeSplitOffFrame splits a frame such that it is not bigger than n bytes.
// It returns if the frame was actually split.
// The frame might not be split if:
// * the size is large enough to fit the whole frame
// * the size is too small to fit even a 1-byte frame. In that case, the frame returned is nil.
func (f *StreamFrame) MaybeSplitOffFrame(maxSize protocol.ByteCount, version protocol.Version) (*StreamFrame, bool /* was splitting required */) {
	if maxSize >= f.Length(version) {
		return nil, false
	}

	n := f.MaxDataLen(maxSize, version)
	if n == 0 {
		return nil, true
	}

	new := GetStreamFrameFor(protocol.ByteCount(len(f.Data)) - n) // shade: f keeps its buffer
	new.StreamID = f.StreamID
	new.Offset = f.Offset
	new.Fin = false
	new.DataLenPresent = f.DataLenPresent

	// swap the data slices
	new.Data, f.Data = f.Data, new.Data
	new.fromPool, f.fromPool = f.fromPool, new.fromPool

	f.Data = f.Data[:protocol.ByteCount(len(new.Data))-n]
	copy(f.Data, new.Data[n:])
	new.Data = new.Data[:n]
	f.Offset += n

	return new, true
}

func (f *StreamFrame) PutBack() {
	if r := f.release; r != nil { // shade: data in a packet buffer
		f.release, f.Data = nil, nil
		r()
		return
	}
	putStreamFrame(f)
}
