# The payload bucket: ephemeral per-request blobs written by inference servers, read by
# trainer ranks and deleted on consume. Lifecycle rules are only the backstop.

locals {
  # One source for the lifecycle values, shared with objstore_payload.lifecycle.rules.
  defaults              = jsondecode(file("${path.module}/lifecycle.json"))
  expire_days           = coalesce(var.expire_days, local.defaults.expire_days)
  abort_incomplete_days = coalesce(var.abort_incomplete_days, local.defaults.abort_incomplete_days)
  prefix                = "${trim(var.payload_prefix, "/")}/"
}

resource "aws_s3_bucket" "payloads" {
  #checkov:skip=CKV_AWS_21:Versioning turns every delete into a delete marker plus a noncurrent version; payloads are ephemeral and must really go.
  #checkov:skip=CKV_AWS_144:Cross-region replication would copy blobs that live for minutes and double the cost.
  #checkov:skip=CKV_AWS_143:Object lock contradicts delete-on-consume.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events; readers are told where blobs are.
  #checkov:skip=CKV_AWS_18:Access logging of millions of short-lived blobs; audit with CloudTrail data events if needed.
  #checkov:skip=CKV_AWS_145:SSE-S3 is the default; set kms_key_arn to use a customer key.
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_public_access_block" "payloads" {
  bucket                  = aws_s3_bucket.payloads.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "payloads" {
  bucket = aws_s3_bucket.payloads.id
  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs disabled
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "payloads" {
  bucket = aws_s3_bucket.payloads.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "payloads" {
  bucket = aws_s3_bucket.payloads.id

  rule {
    id     = "objstore-payload-expire-${replace(trim(var.payload_prefix, "/"), "/", "-")}-${substr(sha1(local.prefix), 0, 8)}"
    status = "Enabled"
    filter {
      prefix = local.prefix
    }
    expiration {
      days = local.expire_days
    }
  }

  rule {
    # Bucket-wide: a prefix-scoped abort rule would leave other uploads' parts billed.
    id     = "objstore-payload-abort-incomplete-multipart"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = local.abort_incomplete_days
    }
  }
}

data "aws_iam_policy_document" "tls_only" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.payloads.arn,
      "${aws_s3_bucket.payloads.arn}/*",
    ]
    principals {
      type        = "AWS"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "tls_only" {
  bucket     = aws_s3_bucket.payloads.id
  policy     = data.aws_iam_policy_document.tls_only.json
  depends_on = [aws_s3_bucket_public_access_block.payloads]
}
