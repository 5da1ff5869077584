package policy

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// jsonToValue converts a JSON document straight into an OPA value, the way
// ast.ValueFromReader does but without decoding into map[string]any first:
// on the input of a 100-step workflow that halves the cost of an
// evaluation. Numbers keep their literal spelling (ast.Number), as they do
// with ast.ValueFromReader, and the numbers OPA refuses are refused here
// too; a test compares the two.
func jsonToValue(b []byte) (ast.Value, error) {
	p := jsonParser{b: b}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return nil, p.errorf("text after the JSON document")
	}
	return v, nil
}

// maxJSONDepth bounds nesting, so hostile input cannot exhaust the stack.
const maxJSONDepth = 1000

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("decode JSON at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (ast.Value, error) {
	if depth > maxJSONDepth {
		return nil, p.errorf("nested deeper than %d", maxJSONDepth)
	}
	if p.i >= len(p.b) {
		return nil, p.errorf("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return ast.String(s), nil
	case c == 't':
		return p.literal("true", ast.Boolean(true))
	case c == 'f':
		return p.literal("false", ast.Boolean(false))
	case c == 'n':
		return p.literal("null", ast.Null{})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errorf("unexpected character %q", c)
	}
}

func (p *jsonParser) literal(word string, v ast.Value) (ast.Value, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.errorf("invalid literal")
	}
	p.i += len(word)
	return v, nil
}

func (p *jsonParser) object(depth int) (ast.Value, error) {
	p.i++ // {
	var pairs [][2]*ast.Term
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return ast.NewObject(), nil
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.errorf("want a string key")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.errorf("want ':' after an object key")
		}
		p.i++
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, [2]*ast.Term{ast.StringTerm(k), ast.NewTerm(v)})
		p.space()
		if p.i >= len(p.b) {
			return nil, p.errorf("unexpected end in an object")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			obj := ast.NewObjectWithCapacity(len(pairs))
			for _, kv := range pairs {
				obj.Insert(kv[0], kv[1]) // a repeated key keeps its last value, as in encoding/json
			}
			return obj, nil
		default:
			return nil, p.errorf("want ',' or '}' in an object")
		}
	}
}

func (p *jsonParser) array(depth int) (ast.Value, error) {
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return ast.NewArray(), nil
	}
	var terms []*ast.Term
	for {
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		terms = append(terms, ast.NewTerm(v))
		p.space()
		if p.i >= len(p.b) {
			return nil, p.errorf("unexpected end in an array")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return ast.NewArray(terms...), nil
		default:
			return nil, p.errorf("want ',' or ']' in an array")
		}
	}
}

// str reads a string; ones with escapes or invalid UTF-8 go through
// encoding/json so they mean what they mean there (\uXXXX, surrogate
// pairs, U+FFFD for bad bytes).
func (p *jsonParser) str() (string, error) {
	start := p.i
	p.i++ // "
	escaped := false
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '\\':
			escaped = true
			p.i += 2
			continue
		case c == '"':
			p.i++
			if raw := p.b[start+1 : p.i-1]; !escaped && utf8.Valid(raw) {
				return string(raw), nil
			}
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", p.errorf("invalid string: %v", err)
			}
			return s, nil
		case c < 0x20:
			return "", p.errorf("control character in a string")
		}
		p.i++
	}
	return "", p.errorf("unterminated string")
}

func (p *jsonParser) number() (ast.Value, error) {
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			p.i++
			continue
		}
		break
	}
	lit := p.b[start:p.i]
	if !json.Valid(lit) {
		return nil, p.errorf("invalid number %q", lit)
	}
	// OPA refuses numbers whose exponent would make evaluation cost
	// non-linear (1e100000); so does this parser, with OPA's own check.
	n, err := ast.NumberChecked(string(lit))
	if err != nil {
		return nil, p.errorf("%v", err)
	}
	return n, nil
}
