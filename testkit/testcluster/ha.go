package testcluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/pki"
)

// ControlPlane is a further control plane on the cluster's store (which
// must be PostgreSQL for it to mean anything): same PKI, same models, its
// own listeners.
type ControlPlane struct {
	Name      string
	Client    string // client API base URL (…/v1)
	Manage    string
	AgentAddr string
	// Metrics is its /metrics address.
	Metrics string
	CfgPath string
	Proc    *Proc
	c       *Cluster
}

// AddControlPlane starts another control plane named name ("cp-2", …) on
// the cluster's store and waits for its client API to listen.
func (c *Cluster) AddControlPlane(name string) *ControlPlane {
	t := c.t
	t.Helper()
	p := FreePorts(t, 4)
	cp := &ControlPlane{Name: name, c: c,
		Client:    "http://127.0.0.1:" + strconv.Itoa(p[0]) + "/v1",
		Manage:    "127.0.0.1:" + strconv.Itoa(p[1]),
		AgentAddr: "127.0.0.1:" + strconv.Itoa(p[2]),
		Metrics:   "http://127.0.0.1:" + strconv.Itoa(p[3]) + "/metrics",
	}
	// serverConfig reads the listeners, PKI and store from a Cluster.
	cfg, err := serverConfig(&Cluster{Manage: cp.Manage, AgentAddr: cp.AgentAddr, PKIDir: c.PKIDir, StoreDSN: c.StoreDSN}, p, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HA.Name = name
	cp.CfgPath = filepath.Join(c.Dir, "server-"+name+".yaml")
	if err := cfg.WriteFile(cp.CfgPath, "Written by testcluster."); err != nil {
		t.Fatal(err)
	}
	cp.Proc = Start(t, c.Binary, "server "+name, "server", "-c", cp.CfgPath)
	c.allProcs = append(c.allProcs, cp.Proc)
	WaitFor(t, "the client API of "+name+" to listen", 30*time.Second, func() (bool, string) {
		conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(cp.Client, "http://"), "/v1"))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	return cp
}

// ManageClient dials this control plane's management API with the admin
// token.
func (cp *ControlPlane) ManageClient() managev1.ManageServiceClient {
	return cp.c.manageClientAt(cp.Manage)
}

// manageClientAt dials a management API of the cluster.
func (c *Cluster) manageClientAt(addr string) managev1.ManageServiceClient {
	t := c.t
	tlsCfg, err := pki.ClientTLS(filepath.Join(c.PKIDir, "ca.pem"), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithPerRPCCredentials(tokenCreds(c.Token)))
	if err != nil {
		t.Fatal(fmt.Errorf("dialling %s: %w", addr, err))
	}
	t.Cleanup(func() { conn.Close() })
	return managev1.NewManageServiceClient(conn)
}
