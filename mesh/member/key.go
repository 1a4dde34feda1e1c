package member

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// DecodeKey decodes a gossip key given as base64 (standard or URL
// alphabet, padded or not), as from a flag or an environment variable.
// The key must be 16, 24 or 32 bytes. Errors wrap ErrKey and never
// contain the key.
func DecodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrKey)
	}
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		if key, err := enc.DecodeString(s); err == nil {
			if err := validKey(key); err != nil {
				return nil, err
			}
			return key, nil
		}
	}
	return nil, fmt.Errorf("%w: not base64 (%d characters)", ErrKey, len(s))
}

func validKey(key []byte) error {
	switch len(key) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: %d bytes, want 16, 24 or 32 (AES-128, -192, -256)", ErrKey, len(key))
}
