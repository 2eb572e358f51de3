// GSM8K answers as lm-evaluation-harness's gsm8k_cot task reads them: the strict and flexible
// extractions of a generation and the exact-match normalisation both sides go through.
#pragma once

#include <string>

namespace tq::eval {

// The first "The answer is N" (the harness's regex `The answer is (\-?[0-9\.\,]+).`), else
// "[invalid]".
std::string gsm8k_strict(const std::string& generation);
// The last number-like run (`(-?[$0-9.,]{2,})|(-?[0-9]+)`), else "[invalid]".
std::string gsm8k_flexible(const std::string& generation);
// Exact match after removing ',', '$', everything through the last "#### ", one trailing '.',
// and lower-casing (the harness's regexes_to_ignore with ignore_case).
bool gsm8k_match(const std::string& extracted, const std::string& reference);
// What gsm8k_match compares.
std::string gsm8k_normalize(std::string s);

// A generation cut at the first of the harness's stop strings ("Q:", "</s>", "<|im_end|>").
std::string gsm8k_cut(const std::string& generation);

}  // namespace tq::eval
