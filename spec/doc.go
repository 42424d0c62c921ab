// Package spec is the contract's shared vocabulary: what every side of llmgw
// (the Terraform provider, `llmgw ctl`, the control plane and the agent) must
// agree on, written once.
//
// It holds a model definition with its validation, the name rules, the
// generation that decides whether a change rolls a model's replicas, a node's
// declaration, and the formats of API keys, admin tokens and project names.
// It holds types, validation and pure rules only: no I/O beyond parsing bytes
// it is handed, no server logic, and it imports nothing of the project but
// shared libraries. The protocol's messages live in api/; package api/specpb
// converts between the two.
package spec
