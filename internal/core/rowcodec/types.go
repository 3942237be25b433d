// Package rowcodec is the schema-driven SSP2 row codec (SPEC §2.4): a null
// bitmap followed by the non-null values in column order, no names, no tags.
package rowcodec

// Type is a column type tag (§2.4).
type Type uint8

const (
	TypeString  Type = 1
	TypeInteger Type = 2
	TypeFloat   Type = 3
	TypeBoolean Type = 4
	TypeJSON    Type = 5
	TypeBytes   Type = 6
	TypeBlobRef Type = 7
	TypeCRDT    Type = 8
)

// Column is one positional column of a row codec.
type Column struct {
	Name     string
	Type     Type
	Nullable bool
}

// Value is one decoded column value. Which field holds the value depends
// on the column type: Str for string, json and blob_ref (raw text kept
// verbatim), Int for integer, Float for float, Bool for boolean, Bytes for
// bytes and crdt. Null marks SQL NULL.
type Value struct {
	Null  bool
	Int   int64
	Float float64
	Bool  bool
	Str   string
	Bytes []byte
}

// Plain is v as a plain Go value for a column of type t: nil for NULL,
// int64, float64, bool, []byte (bytes and crdt), or string (string, json
// and blob_ref, their text verbatim).
func (v Value) Plain(t Type) any {
	if v.Null {
		return nil
	}
	switch t {
	case TypeInteger:
		return v.Int
	case TypeFloat:
		return v.Float
	case TypeBoolean:
		return v.Bool
	case TypeBytes, TypeCRDT:
		return v.Bytes
	default:
		return v.Str
	}
}
