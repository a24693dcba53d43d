package endpoint

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Key seals endpoints' signing secrets in the database (AES-256-GCM, each
// secret bound to its endpoint), so that a reader of the database alone
// can neither sign nor move a secret to another endpoint. It is given to
// outboxd run and outboxctl as OUTBOXD_ENDPOINT_KEY: 32 random bytes in
// base64 (outboxctl endpoints new-key prints one). Keep it where the
// other secrets of outboxd are; losing it means rotating every endpoint's
// secret.
//
// To change it, give a comma-separated list, the new key first: new
// secrets are sealed with the first, and a secret opens with whichever key
// of the list it was sealed with; outboxctl endpoints reseal then seals
// every secret again with the first, after which the old key can go.
type Key struct {
	keys []sealKey
}

// sealKey is one key of a Key's list.
type sealKey struct {
	aead cipher.AEAD
	// id is the first bytes of the key's SHA-256, stored with each sealed
	// secret, so that a secret sealed under another key is named as such.
	id [4]byte
}

// KeySize is the length of a Key, in bytes.
const KeySize = 32

// ParseKey reads a Key from its base64 form (standard or URL alphabet,
// with or without padding), or a comma-separated list of them, the key
// that seals first.
func ParseKey(s string) (*Key, error) {
	k := &Key{}
	parts := strings.Split(s, ",")
	for i, part := range parts {
		sk, err := parseOne(part)
		if err != nil {
			if len(parts) > 1 {
				return nil, fmt.Errorf("endpoint key %d of %d: %w", i+1, len(parts), err)
			}
			return nil, err
		}
		k.keys = append(k.keys, sk)
	}
	return k, nil
}

func parseOne(s string) (sealKey, error) {
	s = strings.TrimSpace(s)
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil {
		return sealKey{}, errors.New("endpoint key: not base64: give 32 random bytes in base64 (outboxctl endpoints new-key prints one)")
	}
	if len(raw) != KeySize {
		return sealKey{}, fmt.Errorf("endpoint key: %d bytes, want %d: give 32 random bytes in base64 (outboxctl endpoints new-key prints one)", len(raw), KeySize)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return sealKey{}, fmt.Errorf("endpoint key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealKey{}, fmt.Errorf("endpoint key: %w", err)
	}
	sk := sealKey{aead: aead}
	sum := sha256.Sum256(raw)
	copy(sk.id[:], sum[:])
	return sk, nil
}

// sealingID is the id of the key that seals: a sealed value that does not
// start with it is resealed by Registry.Reseal.
func (k *Key) sealingID() []byte { return k.keys[0].id[:] }

// ids are the ids of every key of the list.
func (k *Key) ids() [][]byte {
	out := make([][]byte, len(k.keys))
	for i := range k.keys {
		out[i] = k.keys[i].id[:]
	}
	return out
}

// NewKey returns a new random key in the form ParseKey reads.
func NewKey() string {
	return base64.StdEncoding.EncodeToString(randomBytes(KeySize))
}

// sealVersion starts every sealed secret: version, key id, nonce, sealed
// text.
const sealVersion = 1

// What a sealed value is for: it opens only as what it was sealed as.
const (
	purposeSecret    = "secret"
	purposeClientKey = "client key"
)

func (k *Key) seal(endpoint uuid.UUID, secret string) []byte {
	return k.sealFor(endpoint, purposeSecret, secret)
}

func (k *Key) sealFor(endpoint uuid.UUID, purpose, plain string) []byte {
	sk := k.keys[0]
	out := append([]byte{sealVersion}, sk.id[:]...)
	nonce := randomBytes(sk.aead.NonceSize())
	out = append(out, nonce...)
	return sk.aead.Seal(out, nonce, []byte(plain), additional(endpoint, purpose))
}

func (k *Key) open(endpoint uuid.UUID, sealed []byte) (string, error) {
	return k.openFor(endpoint, purposeSecret, sealed)
}

// errOtherKey is a value sealed under a key that is not in the list.
var errOtherKey = errors.New("sealed under another endpoint key: give outboxd the key the secret was created with (a list, new key first, opens both), or rotate the endpoint's secret")

func (k *Key) openFor(endpoint uuid.UUID, purpose string, sealed []byte) (string, error) {
	if len(sealed) < 1+4 || sealed[0] != sealVersion {
		return "", errors.New("not a sealed endpoint secret")
	}
	for _, sk := range k.keys {
		if string(sealed[1:1+len(sk.id)]) != string(sk.id[:]) {
			continue
		}
		head := 1 + len(sk.id) + sk.aead.NonceSize()
		if len(sealed) < head {
			return "", errors.New("not a sealed endpoint secret")
		}
		plain, err := sk.aead.Open(nil, sealed[1+len(sk.id):head], sealed[head:], additional(endpoint, purpose))
		if err != nil {
			return "", errors.New("cannot be opened with this key for this endpoint (altered, or copied from another endpoint): rotate the endpoint's secret")
		}
		return string(plain), nil
	}
	return "", errOtherKey
}

func additional(endpoint uuid.UUID, purpose string) []byte {
	if purpose == purposeSecret {
		return append([]byte("outboxd endpoint secret "), endpoint[:]...)
	}
	return append([]byte("outboxd endpoint "+purpose+" "), endpoint[:]...)
}

// newSecret returns a new signing secret in the Standard Webhooks form:
// whsec_ and 24 random bytes in base64.
func newSecret() string {
	return "whsec_" + base64.StdEncoding.EncodeToString(randomBytes(24))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}
