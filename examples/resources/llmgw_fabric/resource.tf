# An InfiniBand fabric; nodes name it in their fabric attribute.
resource "llmgw_fabric" "ib_a" {
  name        = "ib-a"
  description = "rack A, HDR 200 Gb/s"
}
