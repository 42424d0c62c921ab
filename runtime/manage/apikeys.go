package manage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// maxKeyName bounds a key's name: it is shown in listings, not a document.
const maxKeyName = 200

func apiKeyProto(k store.APIKey) *managev1.ApiKey {
	return &managev1.ApiKey{
		Id: k.ID, Name: k.Name, Prefix: k.Prefix, Project: k.Project, Rpm: k.RPM, Tpm: k.TPM,
		ExpiresUnixMs: unixMsPtr(k.ExpiresAt), CreatedUnixMs: unixMs(k.CreatedAt),
		LastUsedUnixMs: unixMsPtr(k.LastUsedAt), RevokedUnixMs: unixMsPtr(k.RevokedAt),
	}
}

func newKeyID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "key-" + hex.EncodeToString(b[:])
}

// CreateApiKey creates a key in a project. The secret is the client's (only
// its hash is kept, and it is not sent back) or a new one returned this once.
func (s *Service) CreateApiKey(ctx context.Context, req *managev1.CreateApiKeyRequest) (*managev1.CreateApiKeyResponse, error) {
	k := req.GetKey()
	if k == nil {
		return nil, invalid("key", "is required")
	}
	name := strings.TrimSpace(k.GetName())
	if name == "" {
		return nil, invalid("key name", "is required")
	}
	if len(name) > maxKeyName {
		return nil, invalid("key name", "at most %d characters, got %d", maxKeyName, len(name))
	}
	project := k.GetProject()
	if project == "" {
		project = store.DefaultProject
	}
	if err := validLimits("key "+name, k.GetRpm(), k.GetTpm()); err != nil {
		return nil, err
	}
	var expires *time.Time
	if ms := k.GetExpiresUnixMs(); ms != 0 {
		t := time.UnixMilli(ms).UTC()
		if !t.After(s.now()) {
			return nil, invalid("key "+name+" expires_at", "%s is not in the future", t.Format(time.RFC3339))
		}
		expires = &t
	}
	var plain, prefix, hash string
	if sup := req.GetSecret(); sup != "" {
		var err error
		if prefix, hash, err = spec.ParseAPIKey(sup); err != nil {
			return nil, invalid("key "+name+" secret", "%v", err)
		}
	} else {
		plain, prefix, hash = spec.NewAPIKey()
	}
	sk := store.APIKey{ID: newKeyID(), Name: name, Prefix: prefix, Hash: hash, Project: project, RPM: k.GetRpm(), TPM: k.GetTpm(), ExpiresAt: expires}
	if err := s.opts.Store.CreateAPIKey(ctx, sk); err != nil {
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, status.Errorf(codes.NotFound, "creating key %q: project %q does not exist", name, project)
		case errors.Is(err, store.ErrAlreadyExists) && plain == "":
			// Only a supplied secret can collide; never say which key has it.
			return nil, status.Errorf(codes.AlreadyExists, "creating key %q: the supplied secret is already in use; generate a new one", name)
		}
		return nil, tenancyError("creating key "+name, err)
	}
	got, err := s.opts.Store.GetAPIKey(ctx, sk.ID)
	if err != nil {
		return nil, tenancyError("reading key "+sk.ID, err)
	}
	s.log.Info("api key created", "key", sk.ID, "name", name, "project", project, "client_secret", plain == "")
	return &managev1.CreateApiKeyResponse{Key: apiKeyProto(got), Secret: plain}, nil
}

// GetApiKey returns one key, revoked or not, never its secret.
func (s *Service) GetApiKey(ctx context.Context, req *managev1.GetApiKeyRequest) (*managev1.ApiKey, error) {
	k, err := s.opts.Store.GetAPIKey(ctx, req.GetId())
	if err != nil {
		return nil, tenancyError("getting key "+req.GetId(), err)
	}
	return apiKeyProto(k), nil
}

// UpdateApiKey replaces a key's own limits.
func (s *Service) UpdateApiKey(ctx context.Context, req *managev1.UpdateApiKeyRequest) (*managev1.ApiKey, error) {
	if err := validLimits("key "+req.GetId(), req.GetRpm(), req.GetTpm()); err != nil {
		return nil, err
	}
	if err := s.opts.Store.SetAPIKeyLimits(ctx, req.GetId(), req.GetRpm(), req.GetTpm()); err != nil {
		return nil, tenancyError("updating key "+req.GetId(), err)
	}
	s.log.Info("api key limits set", "key", req.GetId(), "rpm", req.GetRpm(), "tpm", req.GetTpm())
	return s.GetApiKey(ctx, &managev1.GetApiKeyRequest{Id: req.GetId()})
}

// RevokeApiKey revokes a key; revoking twice keeps the first time.
func (s *Service) RevokeApiKey(ctx context.Context, req *managev1.RevokeApiKeyRequest) (*managev1.ApiKey, error) {
	if err := s.opts.Store.RevokeAPIKey(ctx, req.GetId()); err != nil {
		return nil, tenancyError("revoking key "+req.GetId(), err)
	}
	s.log.Info("api key revoked", "key", req.GetId())
	return s.GetApiKey(ctx, &managev1.GetApiKeyRequest{Id: req.GetId()})
}

// ListApiKeys lists keys, of one project or all, without secrets.
func (s *Service) ListApiKeys(ctx context.Context, req *managev1.ListApiKeysRequest) (*managev1.ListApiKeysResponse, error) {
	if p := req.GetProject(); p != "" {
		if _, err := s.opts.Store.GetProject(ctx, p); err != nil {
			return nil, tenancyError("listing keys", err)
		}
	}
	list, err := s.opts.Store.ListAPIKeys(ctx)
	if err != nil {
		return nil, tenancyError("listing keys", err)
	}
	out := &managev1.ListApiKeysResponse{}
	for _, k := range list {
		if (req.GetProject() != "" && k.Project != req.GetProject()) || (k.RevokedAt != nil && !req.GetIncludeRevoked()) {
			continue
		}
		out.Keys = append(out.Keys, apiKeyProto(k))
	}
	return out, nil
}
