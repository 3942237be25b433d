// Command imagetool builds and pushes the realtime tier's image without
// Docker (make realtime-image, make realtime-image-push):
//
//	imagetool -binary bin/syncular-realtime -schema examples/todo/schema.json -arch arm64 -out bin/syncular-realtime.tar
//	imagetool -push 123456789012.dkr.ecr.us-east-1.amazonaws.com/syncular-realtime:v1 -out bin/syncular-realtime.tar
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/skyfold/syncular-lambda/cmd/syncular-realtime/image"
)

func main() {
	binary := flag.String("binary", "", "the static syncular-realtime binary")
	schema := flag.String("schema", "", "the schema document served (SYNC_SCHEMA_PATH in the image)")
	validators := flag.String("validators", "", "the declarative validators document, if any (SYNC_VALIDATORS_PATH in the image)")
	ca := flag.String("ca", image.DefaultCABundle, "CA certificate bundle of the build machine")
	arch := flag.String("arch", "arm64", "GOARCH of the binary")
	out := flag.String("out", "bin/syncular-realtime.tar", "image tarball")
	tag := flag.String("tag", "syncular-realtime:latest", "tag recorded in the tarball")
	push := flag.String("push", "", "push the tarball at -out to this reference instead of building")
	flag.Parse()
	if err := run(image.Spec{Binary: *binary, Schema: *schema, Validators: *validators, CABundle: *ca, Arch: *arch}, *out, *tag, *push); err != nil {
		fmt.Fprintln(os.Stderr, "imagetool:", err)
		os.Exit(1)
	}
}

func run(spec image.Spec, out, tag, push string) error {
	if push != "" {
		if err := image.Push(out, push, os.Getenv); err != nil {
			return err
		}
		fmt.Println("pushed", push)
		return nil
	}
	if spec.Binary == "" || spec.Schema == "" {
		return fmt.Errorf("-binary and -schema are required")
	}
	img, err := image.Build(spec)
	if err != nil {
		return err
	}
	if err := image.Write(out, tag, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, linux/%s)\n", out, d, spec.Arch)
	return nil
}
