package rowcodec

import "strconv"

// MaxSafeInt is 2^53−1, the bound of every i64 on the wire (Conventions:
// the JavaScript safe-integer contract).
const MaxSafeInt = 1<<53 - 1

var typeNames = [...]string{
	TypeString:  "string",
	TypeInteger: "integer",
	TypeFloat:   "float",
	TypeBoolean: "boolean",
	TypeJSON:    "json",
	TypeBytes:   "bytes",
	TypeBlobRef: "blob_ref",
	TypeCRDT:    "crdt",
}

// Valid reports whether t is one of the eight §2.4 tags.
func (t Type) Valid() bool { return t >= TypeString && t <= TypeCRDT }

// String returns the §2.4 spec name ("string", "blob_ref", …) used in the
// §11.1 rendering; an unknown tag renders as "type(N)".
func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// ParseType maps a §2.4 spec name to its tag.
func ParseType(name string) (Type, bool) {
	for t := TypeString; t <= TypeCRDT; t++ {
		if typeNames[t] == name {
			return t, true
		}
	}
	return 0, false
}
