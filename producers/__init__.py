"""The client SDK: validate, count tokens, pick the bucket, produce, and await replies
(``headrace.Client``)."""
