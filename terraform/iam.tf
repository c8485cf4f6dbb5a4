# Three least-privilege policies, one per role of the data plane. Attach them to the
# roles your inference servers, trainers and orchestrator run as.

data "aws_iam_policy_document" "writer" {
  statement {
    sid = "WritePayloads"
    # s3:GetObject covers the HEAD that checks each upload's stored size
    # (StoreConfig.verify_writes); the writer still cannot list or delete.
    actions   = ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.payloads.arn}/${local.prefix}*"]
  }
}

data "aws_iam_policy_document" "reader" {
  statement {
    sid       = "ReadPayloads"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.payloads.arn}/${local.prefix}*"]
  }
}

data "aws_iam_policy_document" "collector" {
  statement {
    sid       = "ListPayloads"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.payloads.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.prefix}*"]
    }
  }
  statement {
    sid       = "DeletePayloads"
    actions   = ["s3:DeleteObject"]
    resources = ["${aws_s3_bucket.payloads.arn}/${local.prefix}*"]
  }
}

resource "aws_iam_policy" "writer" {
  name        = "${var.bucket_name}-payload-writer"
  description = "Inference servers: write payload blobs."
  policy      = data.aws_iam_policy_document.writer.json
  tags        = var.tags
}

resource "aws_iam_policy" "reader" {
  name        = "${var.bucket_name}-payload-reader"
  description = "Trainer ranks: read payload blobs."
  policy      = data.aws_iam_policy_document.reader.json
  tags        = var.tags
}

resource "aws_iam_policy" "collector" {
  name        = "${var.bucket_name}-payload-collector"
  description = "Orchestrator: list and delete payload blobs."
  policy      = data.aws_iam_policy_document.collector.json
  tags        = var.tags
}
