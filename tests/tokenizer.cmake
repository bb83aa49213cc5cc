# tests for issue 4 (tokenizer): filled in as the parts land
