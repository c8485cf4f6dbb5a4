variable "bucket_name" {
  description = "Name of the payload bucket."
  type        = string
}

variable "payload_prefix" {
  description = "Key prefix the payload blobs live under (the store root without the bucket), e.g. \"run/payloads\"."
  type        = string
  default     = "payloads"

  validation {
    condition     = length(trim(var.payload_prefix, "/")) > 0
    error_message = "The payload prefix must not be the whole bucket."
  }
}

variable "expire_days" {
  description = "Days after which objects under the payload prefix expire (the backstop for what a crashed run leaves). Null takes the shared default in lifecycle.json."
  type        = number
  default     = null
}

variable "abort_incomplete_days" {
  description = "Days after which incomplete multipart uploads are aborted, bucket-wide. Null takes the shared default in lifecycle.json."
  type        = number
  default     = null
}

variable "kms_key_arn" {
  description = "KMS key for server-side encryption; null uses SSE-S3 (AES256), which needs no extra IAM permissions on every request."
  type        = string
  default     = null
}

variable "force_destroy" {
  description = "Allow destroying the bucket while it still holds payloads (they are ephemeral)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
