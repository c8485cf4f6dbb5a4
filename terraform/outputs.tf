output "bucket" {
  description = "Name of the payload bucket."
  value       = aws_s3_bucket.payloads.id
}

output "bucket_arn" {
  description = "ARN of the payload bucket."
  value       = aws_s3_bucket.payloads.arn
}

output "store_root" {
  description = "The root URL to configure (OBJSTORE_PAYLOAD_ROOT)."
  value       = "s3://${aws_s3_bucket.payloads.id}/${trim(var.payload_prefix, "/")}"
}

output "writer_policy_arn" {
  description = "Policy for inference servers (PutObject, AbortMultipartUpload on the prefix)."
  value       = aws_iam_policy.writer.arn
}

output "reader_policy_arn" {
  description = "Policy for trainer ranks (GetObject on the prefix)."
  value       = aws_iam_policy.reader.arn
}

output "collector_policy_arn" {
  description = "Policy for the orchestrator (ListBucket on the prefix, DeleteObject on the prefix)."
  value       = aws_iam_policy.collector.arn
}
