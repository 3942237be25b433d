package httpapi

// EncodeBodyForTest exposes encodeBody to the external benchmarks.
func EncodeBodyForTest(plain []byte, enc string) ([]byte, string) { return encodeBody(plain, enc) }
