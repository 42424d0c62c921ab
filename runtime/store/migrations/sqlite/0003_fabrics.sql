-- InfiniBand fabrics declared through the management API (Terraform's
-- llmgw_fabric). Nodes name the fabric they are in; membership is
-- configuration, never discovery.
CREATE TABLE fabrics (
    name        TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
