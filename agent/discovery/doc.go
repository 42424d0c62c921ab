// Package discovery finds what a node actually has: GPUs (through nvidia-smi),
// InfiniBand adapters (through sysfs), memory, CPU, disk and the models present
// in its model directories. Each probe lives in its own file and reads only the
// path it is given, so tests and `llmgw dev` point the same code at simulated
// hardware (see the simhw package).
//
// Discover runs every probe and never fails as a whole: a probe that fails
// leaves its error in the Inventory, and the fabric verdicts compare what the
// node declared with what was found.
package discovery
