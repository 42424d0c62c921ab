// Package gguf writes a tiny llama-architecture model in GGUF v3 with random
// weights, for tests that start a real llama-server without downloading a
// model. The tokenizer is GPT-2 style byte-level BPE: 256 byte tokens, a few
// merges, and the control tokens of its ChatML chat template.
package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
)

// Model describes the tiny model. The zero value of a field takes the
// default below.
type Model struct {
	Name          string // general.name; "llmgw-tiny"
	Layers        int    // 2
	Embedding     int    // 64
	FeedForward   int    // 128
	Heads         int    // 4
	ContextLength int    // 2048
	Seed          uint64 // 1
}

// The value types of GGUF metadata (gguf.h's gguf_type).
const (
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
)

const (
	ggmlF32   = 0 // ggml_type of a tensor
	alignment = 32
)

// merges are the BPE merges beyond the byte tokens: each pair makes the
// token of its two halves joined ("Ġ" is GPT-2's byte-level space).
var merges = [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"Ġ", "t"}, {"Ġt", "he"}, {"o", "r"}, {"e", "r"}, {"i", "n"}}

// chatTemplate is ChatML with tools in the style of Hermes and Qwen 2.5:
// the tools listed in a system turn, calls as <tool_call> JSON, results
// as <tool_response>. llama-server renders chat requests with it.
const chatTemplate = `{%- if tools %}<|im_start|>system
You may call functions.
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Return each call as <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- if message.content %}
{{ message.content }}{% endif %}
{%- for tc in message.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
`

// Write writes the model to path.
func Write(path string, m Model) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Encode(f, m); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

type tensor struct {
	name string
	dims []uint64 // ne0 first, as ggml orders them
	fill func(i int) float32
}

func (t tensor) elements() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// Encode writes the model as GGUF v3 to w.
func Encode(w io.Writer, m Model) error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&m.Layers, 2)
	def(&m.Embedding, 64)
	def(&m.FeedForward, 128)
	def(&m.Heads, 4)
	def(&m.ContextLength, 2048)
	if m.Name == "" {
		m.Name = "llmgw-tiny"
	}
	if m.Seed == 0 {
		m.Seed = 1
	}
	if m.Embedding%m.Heads != 0 {
		return fmt.Errorf("embedding %d is not a multiple of heads %d", m.Embedding, m.Heads)
	}
	tokens, types := vocabulary()
	mergeText := make([]string, len(merges))
	for i, p := range merges {
		mergeText[i] = p[0] + " " + p[1]
	}
	bos, eos := int32(slices.Index(tokens, "<|endoftext|>")), int32(slices.Index(tokens, "<|im_end|>"))

	rng := rand.New(rand.NewPCG(m.Seed, 0x6c6c6d6777))
	random := func(int) float32 { return float32(rng.NormFloat64() * 0.02) }
	one := func(int) float32 { return 1 }
	e, ff, v := uint64(m.Embedding), uint64(m.FeedForward), uint64(len(tokens))
	tensors := []tensor{{"token_embd.weight", []uint64{e, v}, random}, {"output_norm.weight", []uint64{e}, one}, {"output.weight", []uint64{e, v}, random}}
	for l := 0; l < m.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		tensors = append(tensors,
			tensor{b + "attn_norm.weight", []uint64{e}, one},
			tensor{b + "attn_q.weight", []uint64{e, e}, random},
			tensor{b + "attn_k.weight", []uint64{e, e}, random},
			tensor{b + "attn_v.weight", []uint64{e, e}, random},
			tensor{b + "attn_output.weight", []uint64{e, e}, random},
			tensor{b + "ffn_norm.weight", []uint64{e}, one},
			tensor{b + "ffn_gate.weight", []uint64{e, ff}, random},
			tensor{b + "ffn_up.weight", []uint64{e, ff}, random},
			tensor{b + "ffn_down.weight", []uint64{ff, e}, random},
		)
	}

	bw := bufio.NewWriter(w)
	enc := &encoder{w: bw}
	kv := []func(){
		enc.kvString("general.architecture", "llama"),
		enc.kvString("general.name", m.Name),
		enc.kvUint32("general.alignment", alignment),
		enc.kvUint32("llama.context_length", uint32(m.ContextLength)),
		enc.kvUint32("llama.embedding_length", uint32(m.Embedding)),
		enc.kvUint32("llama.block_count", uint32(m.Layers)),
		enc.kvUint32("llama.feed_forward_length", uint32(m.FeedForward)),
		enc.kvUint32("llama.attention.head_count", uint32(m.Heads)),
		enc.kvUint32("llama.attention.head_count_kv", uint32(m.Heads)),
		enc.kvUint32("llama.rope.dimension_count", uint32(m.Embedding/m.Heads)),
		func() {
			enc.str("llama.attention.layer_norm_rms_epsilon")
			enc.u32(typeFloat32)
			enc.u32(math.Float32bits(1e-5))
		},
		enc.kvUint32("llama.vocab_size", uint32(len(tokens))),
		enc.kvString("tokenizer.ggml.model", "gpt2"),
		enc.kvString("tokenizer.ggml.pre", "default"),
		func() { enc.str("tokenizer.ggml.tokens"); enc.strings(tokens) },
		func() { enc.str("tokenizer.ggml.merges"); enc.strings(mergeText) },
		func() {
			enc.str("tokenizer.ggml.token_type")
			enc.u32(typeArray)
			enc.u32(typeInt32)
			enc.u64(uint64(len(types)))
			for _, t := range types {
				enc.u32(uint32(t))
			}
		},
		enc.kvUint32("tokenizer.ggml.bos_token_id", uint32(bos)),
		enc.kvUint32("tokenizer.ggml.eos_token_id", uint32(eos)),
		func() { enc.str("tokenizer.ggml.add_bos_token"); enc.u32(typeBool); enc.u8(0) },
		enc.kvString("tokenizer.chat_template", chatTemplate),
	}
	enc.u32(0x46554747) // "GGUF"
	enc.u32(3)
	enc.u64(uint64(len(tensors)))
	enc.u64(uint64(len(kv)))
	for _, f := range kv {
		f()
	}
	offset := uint64(0)
	for _, t := range tensors {
		enc.str(t.name)
		enc.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			enc.u64(d)
		}
		enc.u32(ggmlF32)
		enc.u64(offset)
		offset += pad(t.elements() * 4)
	}
	enc.zeros(pad(enc.n) - enc.n)
	for _, t := range tensors {
		n := t.elements()
		for i := 0; i < int(n); i++ {
			enc.u32(math.Float32bits(t.fill(i)))
		}
		enc.zeros(pad(n*4) - n*4)
	}
	if enc.err != nil {
		return enc.err
	}
	return bw.Flush()
}

func pad(n uint64) uint64 { return (n + alignment - 1) / alignment * alignment }

// vocabulary is GPT-2's byte-level alphabet (bytes_to_unicode), the merges'
// results, then the control tokens; types are llama_token_type values
// (1 normal, 3 control).
func vocabulary() ([]string, []int32) {
	var tokens []string
	var types []int32
	for _, r := range byteRunes() {
		tokens = append(tokens, string(r))
		types = append(types, 1)
	}
	for _, p := range merges {
		tokens = append(tokens, p[0]+p[1])
		types = append(types, 1)
	}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, 3)
	}
	// The tool-call markers are tokens of their own, as in Qwen 2.5's
	// vocabulary (user-defined, so they are written out as text): a
	// request can then push the random model to open a call with
	// logit_bias on ToolCallToken, and llama-server's grammar writes the
	// rest of the call.
	for _, s := range []string{"<tool_call>", "</tool_call>"} {
		tokens = append(tokens, s)
		types = append(types, 4)
	}
	return tokens, types
}

// TokenID returns the id of token in the vocabulary Write writes, or -1.
func TokenID(token string) int {
	tokens, _ := vocabulary()
	return slices.Index(tokens, token)
}

// ToolCallToken is the token that opens a tool call in the chat template.
const ToolCallToken = "<tool_call>"

// ToolCallBias is the logit_bias (token id to bias) that has the random
// model of Write answer a chat request with tools through llama-server's
// grammar for the template's <tool_call> format: it pushes the call's
// opening token and a newline, forbids the spaces and tabs the grammar's
// whitespace would otherwise take at random, and pushes end-of-turn
// highest, which the grammar allows only once a call is complete.
func ToolCallBias() map[string]int64 {
	id := func(tok string) string { return strconv.Itoa(TokenID(tok)) }
	byteToken := func(b byte) string { return strconv.Itoa(TokenID(string(byteRunes()[b]))) }
	return map[string]int64{
		id(ToolCallToken): 50, byteToken('\n'): 50,
		byteToken(' '): -100, byteToken('\t'): -100,
		id("<|im_end|>"): 100,
	}
}

// byteRunes is GPT-2's bytes_to_unicode: printable bytes stand for
// themselves, the others are mapped from U+0100 upwards.
func byteRunes() []rune {
	out := make([]rune, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = rune(b)
		} else {
			out[b] = next
			next++
		}
	}
	return out
}

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (e *encoder) write(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u8(v byte) { e.write([]byte{v}) }
func (e *encoder) u32(v uint32) {
	e.write(binary.LittleEndian.AppendUint32(nil, v))
}
func (e *encoder) u64(v uint64) {
	e.write(binary.LittleEndian.AppendUint64(nil, v))
}
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.write([]byte(s)) }
func (e *encoder) zeros(n uint64) {
	e.write(make([]byte, n))
}

// kvString and kvUint32 return the writer of one metadata pair.
func (e *encoder) kvString(key, v string) func() {
	return func() { e.str(key); e.u32(typeString); e.str(v) }
}

func (e *encoder) kvUint32(key string, v uint32) func() {
	return func() { e.str(key); e.u32(typeUint32); e.u32(v) }
}

// strings writes an array of strings (type and count first).
func (e *encoder) strings(ss []string) {
	e.u32(typeArray)
	e.u32(typeString)
	e.u64(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}
