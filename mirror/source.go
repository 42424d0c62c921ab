package mirror

import dl "github.com/llmgw/llmgw/internal/download"

// S3Config is where s3:// sources are read from.
type S3Config = dl.S3Config

// S3ConfigFromEnv reads the standard AWS variables: AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func S3ConfigFromEnv(getenv func(string) string) S3Config { return dl.S3ConfigFromEnv(getenv) }
