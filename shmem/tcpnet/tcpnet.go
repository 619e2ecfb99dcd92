// Package tcpnet is the DSM pagers' transport between hosts (and between
// all ranks when the job's transport is tcp): the job's TCP mesh
// (runtime/mesh) between the pagers, one listening port per pager, one
// connection per ordered pair of ranks, authenticated with the job secret,
// carrying length-prefixed frames. Frames between a pair of ranks arrive in
// the order they were sent. Pagers on one host use package rdmanet.
package tcpnet

import (
	"fmt"

	"github.com/jiarun/jia/runtime/mesh"
	"github.com/jiarun/jia/runtime/peerauth"
)

// MaxFrame is the largest frame a connection carries.
const MaxFrame = 256 << 20

// ErrAuth is returned to a dialler whose handshake was refused.
var ErrAuth = peerauth.ErrAuth

// Config configures a Net.
type Config struct {
	Rank, Size int
	Job        string
	Secret     []byte
	// Host is the IP address to listen on ("" is 127.0.0.1).
	Host string
	// Deliver is called with every frame received, from one goroutine per
	// sending rank, in the order that rank sent them. It must not block for
	// long: it holds up that rank's frames. The frame is the callee's.
	Deliver func(from int, frame []byte)
	// Lost is called once when the connection from a rank ends, with why.
	Lost func(from int, err error)
}

// Net is one rank's end of the transport.
type Net struct {
	*mesh.Mesh
}

// Listen opens the rank's listening port and starts accepting.
func Listen(cfg Config) (*Net, error) {
	m, err := mesh.Listen(mesh.Config{
		Rank: cfg.Rank, Size: cfg.Size, Job: cfg.Job, Secret: cfg.Secret,
		Proto: "JIADSM1", What: "a DSM pager", Prefix: fmt.Sprintf("shmem: rank %d: tcpnet", cfg.Rank),
		MaxFrame: MaxFrame, ReadBuffer: 256 << 10,
		Deliver: cfg.Deliver, Lost: cfg.Lost,
	}, cfg.Host)
	if err != nil {
		return nil, err
	}
	return &Net{m}, nil
}
