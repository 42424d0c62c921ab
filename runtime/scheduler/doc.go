// Package scheduler decides where one replica of a model goes.
//
// It is pure: it takes a Snapshot of the fleet and a Demand and returns a
// Plan, with no I/O, clocks, goroutines or logging. Placement follows the
// shape of Nomad's scheduler, in three stages:
//
//  1. Feasibility. Each node is run through a chain of Checkers, one per
//     concern (ready, engine, GPU class, free GPUs, memory, disk, labels,
//     fabric). The first checker that refuses a node records why; a refusal
//     is an answer, not an error.
//  2. Ranking. Every feasible node is scored by Rankers, one per signal
//     (bin-packing, weights present, spread); the node's score is the mean
//     of its rankers' scores, each in [0, 1]. Ties go to the lower node ID.
//  3. Plan. A single-node profile takes the best node. A multi-node profile
//     groups the feasible nodes by fabric, keeps the fabrics with enough of
//     them, and takes the best nodes of the best fabric; it never mixes
//     fabrics, and a node with no fabric never hosts a multi-node replica.
//
// Profiles are tried in priority order and the first one that places wins.
// What was evaluated, node by node, is the Explanation: the record behind
// `llmgw ctl explain-placement` and `terraform plan`.
//
// A pass that places many replicas uses a Fleet: the Snapshot prepared once
// (nodes sorted and indexed, free GPUs by class kept per node) and updated in
// place by Assume. Its Place checks only the nodes that can rank first (those
// the spread and weights-present rankers set apart, and the first feasible
// nodes of each group of equal GPU totals and free counts) and reaches the
// same decisions as Place; the reasons of the others are worked out only
// when Explain asks.
package scheduler
