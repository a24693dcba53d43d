package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// escapeWriter shows control characters as \u00XX instead of passing them
// to the terminal: receivers' error bodies are stored verbatim and could
// otherwise move the cursor, rewrite lines or set the window title; bidi
// controls (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) are
// escaped too, as they could make a line read in another order. Newline
// and tab, which the tables and JSON use, pass (a table escapes a line
// break inside a value itself: tableWriter). In JSON output the escapes
// are valid string escapes, so --json stays parseable.
type escapeWriter struct {
	w    io.Writer
	tail []byte // an incomplete UTF-8 sequence left by the previous Write
}

func newEscapeWriter(w io.Writer) io.Writer {
	if _, ok := w.(*escapeWriter); ok {
		return w
	}
	return &escapeWriter{w: w}
}

func (e *escapeWriter) Write(p []byte) (int, error) {
	buf := append(e.tail, p...)
	e.tail = nil
	out := make([]byte, 0, len(buf))
	for i := 0; i < len(buf); {
		c := buf[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				out = fmt.Appendf(out, `\u%04x`, c)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(buf[i:]) {
			e.tail = append([]byte(nil), buf[i:]...)
			break
		}
		r, size := utf8.DecodeRune(buf[i:])
		if (r >= 0x80 && r <= 0x9f) || bidi(r) { // C1 controls (e.g. CSI); bidi controls
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, buf[i:i+size]...)
		}
		i += size
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// bidi reports whether r is a Unicode bidirectional formatting control.
func bidi(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
}
