//go:build !unix

package gateway

// ownConns is false here: a kept connection cannot be looked at without
// reading it, so an engine's close during a lull (uvicorn keeps a
// connection 5 s) or bytes it sent unasked would be found only by the next
// request. Engines are reached through http.Transport, whose read loop
// watches every idle connection.
const ownConns = false

// peeker is not used where ownConns is false.
type peeker struct{}

// open is not used where ownConns is false.
func (*upConn) open() bool { return true }
