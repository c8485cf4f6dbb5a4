provider "aws" {
  region = "us-east-1"
}

module "payloads" {
  source         = "../.."
  bucket_name    = "my-rl-run-payloads"
  payload_prefix = "runs/payloads"
  tags = {
    project = "rl"
  }
}

output "store_root" {
  value = module.payloads.store_root
}
