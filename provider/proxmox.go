package provider

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	pveapi "github.com/luthermonson/go-proxmox"

	"github.com/llmgw/llmgw/provider/proxmox"
)

// The provider's side of package proxmox: the client made from the
// provider's proxmox attribute, and Proxmox errors and task warnings as
// diagnostics.

// newPVE makes the Proxmox client, or says what is missing: the message
// names the attribute and the environment variable to set.
func newPVE(s proxmox.Settings) (*proxmox.Client, string) {
	var missing []string
	if s.Endpoint == "" {
		missing = append(missing, "proxmox.endpoint (or "+EnvPVEEndpoint+")")
	}
	if s.TokenID == "" || s.Secret == "" {
		missing = append(missing, "proxmox.api_token_id and proxmox.api_token_secret (or "+EnvPVEToken+"=USER@REALM!TOKENID=SECRET)")
	}
	if len(missing) > 0 {
		return nil, "set " + strings.Join(missing, " and ") + " in the provider's proxmox block"
	}
	c, err := proxmox.New(s)
	if err != nil {
		return nil, "proxmox.ca_file: " + err.Error()
	}
	return c, ""
}

// proxmox returns the Proxmox client, or an error diagnostic saying how to
// configure it.
func (c *Client) proxmox(diags *diag.Diagnostics) *proxmox.Client {
	if c.pve != nil {
		return c.pve
	}
	diags.AddError("The provider's proxmox block is not configured",
		"llmgw_proxmox_vm talks to the Proxmox VE API: "+c.pveMissing+". Example:\n\n"+
			"  provider \"llmgw\" {\n    proxmox = {\n      endpoint         = \"https://pve1:8006/api2/json\"\n      api_token_id     = \"terraform@pve!llmgw\"\n      api_token_secret = var.pve_token_secret\n    }\n  }")
	return nil
}

// withTaskWarnings returns a context that collects the warnings of the
// Proxmox tasks awaited with it, and a function that appends them to diags
// as Terraform warnings (call it deferred).
func withTaskWarnings(ctx context.Context, diags *diag.Diagnostics) (context.Context, func()) {
	ctx, w := proxmox.WithTaskWarnings(ctx)
	return ctx, func() {
		for _, tw := range w.List() {
			diags.AddWarning("A Proxmox VE task ended with warnings",
				fmt.Sprintf("%s: Proxmox task %s succeeded with %s. The warnings are in the task's log, under the node's Tasks in the web UI (or `pvenode task log %s`).", tw.What, tw.UPID, tw.Exit, tw.UPID))
		}
	}
}

// pveDiag turns an error of a Proxmox call into a diagnostic that says what
// to do. op says what was being done.
func pveDiag(pve *proxmox.Client, op string, err error) diag.Diagnostic {
	summary, detail := explainPVE(pve.Endpoint(), op, err)
	return diag.NewErrorDiagnostic(summary, detail)
}

// explainPVE is pveDiag's text.
func explainPVE(endpoint, op string, err error) (summary, detail string) {
	msg := err.Error()
	var te *proxmox.TaskError
	var ue *x509.UnknownAuthorityError
	var he x509.HostnameError
	switch {
	case pveapi.IsNotAuthorized(err):
		return "Proxmox VE refused the API token",
			fmt.Sprintf("%s: %s.\n\nCheck proxmox.api_token_id and proxmox.api_token_secret (or %s=USER@REALM!TOKENID=SECRET): the token must exist (`pveum user token list USER`) and, with privilege separation, hold VM.Allocate, VM.Clone, VM.Config.*, VM.PowerMgmt, Datastore.AllocateSpace, Datastore.AllocateTemplate and Datastore.Allocate (to delete the cloud-init ISO).", op, msg, EnvPVEToken)
	case errors.As(err, &ue) || errors.As(err, &he) || strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:"):
		return "Cannot verify the Proxmox VE API's TLS certificate",
			fmt.Sprintf("%s: %s.\n\nSet proxmox.ca_file to the CA that signed it (on a Proxmox node: /etc/pve/pve-root-ca.pem), or, in a lab, proxmox.insecure = true.", op, msg)
	case errors.As(err, &te):
		return "A Proxmox VE task failed", fmt.Sprintf("%s.\n\nThe message is Proxmox's own; the task log is under the node's Tasks in the web UI.", msg)
	case strings.Contains(msg, " is locked ("):
		return "The VM is locked in Proxmox VE",
			fmt.Sprintf("%s: %s.\n\nAnother Proxmox task (a backup, clone or migration) holds the VM. Wait for it to finish, or clear a stale lock with `qm unlock VMID` on the node, then apply again.", op, msg)
	case strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "Client.Timeout"):
		return "Cannot reach the Proxmox VE API",
			fmt.Sprintf("%s: %s is unreachable: %s.\n\nCheck proxmox.endpoint (or %s): the API listens on port 8006 of every node, as https://NODE:8006/api2/json.", op, endpoint, msg, EnvPVEEndpoint)
	}
	return "The Proxmox VE API call failed", fmt.Sprintf("%s: %s.", op, msg)
}
