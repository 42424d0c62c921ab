package simengine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// TestOpenAIClient checks the response shapes with the official client.
func TestOpenAIClient(t *testing.T) {
	_, srv := newTestServer(t, Config{EmbeddingDim: 16})
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:     testModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello from openai go")},
		MaxTokens: openai.Int(6),
	}

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("chat completion: %v", err)
		}
		if resp.Object != "chat.completion" || resp.Model != testModel || len(resp.Choices) != 1 {
			t.Fatalf("response %+v", resp)
		}
		c := resp.Choices[0]
		if c.Message.Role != "assistant" || len(strings.Fields(c.Message.Content)) != 6 || c.FinishReason != "length" {
			t.Fatalf("choice %+v", c)
		}
		if resp.Usage.PromptTokens != 6 || resp.Usage.CompletionTokens != 6 || resp.Usage.TotalTokens != 12 {
			t.Fatalf("usage %+v", resp.Usage)
		}
	})

	t.Run("streaming chat with usage", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			if !acc.AddChunk(stream.Current()) {
				t.Fatalf("accumulator rejected chunk %d: %s", chunks, stream.Current().RawJSON())
			}
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		plain, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != plain.Choices[0].Message.Content {
			t.Fatalf("accumulated %+v, want content %q", acc.Choices, plain.Choices[0].Message.Content)
		}
		if acc.Choices[0].FinishReason != "length" {
			t.Fatalf("finish reason %q", acc.Choices[0].FinishReason)
		}
		if acc.Usage.TotalTokens != 12 || acc.Usage.CompletionTokens != 6 {
			t.Fatalf("usage %+v", acc.Usage)
		}
	})

	t.Run("tool call", func(t *testing.T) {
		p := params
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "lookup",
			Parameters: shared.FunctionParameters{
				"type":       "object",
				"properties": map[string]any{"query": map[string]string{"type": "string"}, "limit": map[string]string{"type": "integer"}},
			},
		})}
		resp, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		c := resp.Choices[0]
		if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
			t.Fatalf("choice %+v", c)
		}
		call := c.Message.ToolCalls[0]
		var args struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}
		if call.Function.Name != "lookup" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args.Query == "" || args.Limit != 1 {
			t.Fatalf("tool call %+v", call)
		}

		stream := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		var finished []openai.FinishedChatCompletionToolCall
		for stream.Next() {
			acc.AddChunk(stream.Current())
			if tc, ok := acc.JustFinishedToolCall(); ok {
				finished = append(finished, tc)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if len(finished) != 1 || finished[0].Name != "lookup" || finished[0].Arguments != call.Function.Arguments || finished[0].ID != call.ID {
			t.Fatalf("streamed tool calls %+v, want %+v", finished, call)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		resp, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: testModel,
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text", "second"}},
		})
		if err != nil {
			t.Fatalf("embeddings: %v", err)
		}
		if len(resp.Data) != 2 || len(resp.Data[0].Embedding) != 16 || resp.Data[1].Index != 1 || resp.Usage.PromptTokens != 3 {
			t.Fatalf("embeddings %+v", resp)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		p := params
		p.Model = "missing"
		_, err := client.Chat.Completions.New(ctx, p)
		var apiErr *openai.Error
		if err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Fatalf("error %v, want a 404 model_not_found", err)
		}
	})
}
