//! The tokenizer a GGUF file carries, against llama.cpp's own token ids
//! for a set of hard strings (whitespace runs, digits, unicode, emoji,
//! special tokens), on both vocabulary kinds: byte-level BPE (`gpt2`, with
//! Llama 3's pre-tokenizer) and SentencePiece (`llama`, with scores and
//! byte fallback). Fixtures: `tools/reference/gguf_vocab_fixtures.py`, ids
//! from libllama through `tools/reference/llamacpp_reference.cpp`.

use std::path::Path;

use kernelscope_model::gguf_model::GgufModel;

#[test]
fn gguf_vocabularies_tokenize_as_llama_cpp_does() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_vocab");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("strings.json")).unwrap()).unwrap();
    let strings: Vec<&str> = expected["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|text| text.as_str().unwrap())
        .collect();
    assert!(strings.len() >= 12, "the fixture lists its hard strings");
    let mut mismatches = Vec::new();
    for file in ["bpe.gguf", "spm.gguf"] {
        let model = GgufModel::open(&folder.join(file)).unwrap();
        let tokenizer = model.tokenizer().unwrap().expect("the file carries a vocabulary");
        let ids = expected["ids"][file].as_array().unwrap();
        for (text, ids) in strings.iter().zip(ids) {
            let wanted: Vec<u32> = ids
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap() as u32)
                .collect();
            let found = tokenizer.encode(text).unwrap();
            if found != wanted {
                mismatches.push(format!("{file} {text:?}: llama.cpp {wanted:?}, kscope {found:?}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
