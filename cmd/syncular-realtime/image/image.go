// Package image assembles the realtime tier's container image without
// Docker (github.com/google/go-containerregistry): an empty base, the
// build machine's CA certificates, a passwd file naming the non-root
// user, the static binary and the schema document, with the binary as
// the entrypoint. Write saves it as an image tarball (what `docker load`
// and `crane push` read); Push sends a saved tarball to a registry.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	BinaryPath = "/syncular-realtime"
	SchemaPath = "/schema.json"
	// ValidatorsPath holds the declarative validators document when the
	// image carries one (SYNC_VALIDATORS_PATH).
	ValidatorsPath = "/validators.json"
	CAPath         = "/etc/ssl/certs/ca-certificates.crt"
	PasswdPath     = "/etc/passwd"
	// User is the non-root user the tier runs as (the conventional
	// "nonroot" uid/gid of distroless images).
	User = "65532:65532"
)

// DefaultCABundle is where Debian, Ubuntu and Alpine keep the bundle.
const DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

// Spec is what goes into the image.
type Spec struct {
	// Binary, Schema and CABundle are files on the build machine.
	Binary, Schema, CABundle string
	// Validators, when set, is the declarative validators document the
	// functions run (§6.7, §6.8): sync rounds over the socket push too.
	Validators string
	// Arch is the GOARCH of Binary ("arm64" for Fargate ARM64).
	Arch string
	// Created stamps the image; the zero time keeps builds reproducible.
	Created time.Time
}

// Build returns the image of s.
func Build(s Spec) (v1.Image, error) {
	files := []struct {
		path, src string
		mode      int64
	}{
		{CAPath, s.CABundle, 0o444},
		{BinaryPath, s.Binary, 0o555},
		{SchemaPath, s.Schema, 0o444},
	}
	env := []string{"SYNC_SCHEMA_PATH=" + SchemaPath, "SSL_CERT_FILE=" + CAPath}
	if s.Validators != "" {
		files = append(files, struct {
			path, src string
			mode      int64
		}{ValidatorsPath, s.Validators, 0o444})
		env = append(env, "SYNC_VALIDATORS_PATH="+ValidatorsPath)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: s.Created}); err != nil {
			return nil, err
		}
	}
	add := func(path string, body []byte, mode int64) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path[1:], Mode: mode, Size: int64(len(body)), ModTime: s.Created}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := add(PasswdPath, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o444); err != nil {
		return nil, err
	}
	for _, f := range files {
		body, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.path, err)
		}
		if err := add(f.path, body, f.mode); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = env
	cf.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}}
	return mutate.ConfigFile(img, cf)
}

// Write saves img as a tarball at path, tagged ref.
func Write(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: tag %q: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// Read loads the image of a tarball written by Write.
func Read(path string) (v1.Image, error) {
	return tarball.ImageFromPath(path, nil)
}

// Push sends the tarball at path to ref. Credentials: REGISTRY_USERNAME
// and REGISTRY_PASSWORD when set (for ECR: AWS and the output of `aws ecr
// get-login-password`), else the Docker config's (~/.docker/config.json,
// as `docker login` or `crane auth login` writes it).
func Push(path, ref string, getenv func(string) string) error {
	img, err := Read(path)
	if err != nil {
		return fmt.Errorf("image: read %s: %w", path, err)
	}
	dst, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image: reference %q: %w", ref, err)
	}
	opt := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	if u := getenv("REGISTRY_USERNAME"); u != "" {
		opt = remote.WithAuth(&authn.Basic{Username: u, Password: getenv("REGISTRY_PASSWORD")})
	}
	if err := remote.Write(dst, img, opt); err != nil {
		return fmt.Errorf("image: push %s: %w", ref, err)
	}
	return nil
}
