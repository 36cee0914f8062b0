//! Special tokens encoded as single ids, and streaming decode back to text, split characters included.

use kernelscope::rng::SplitMix64;
use kernelscope_model::{ChatTemplate, GenerationPrompt, TextStream, Tokenizer};

use crate::helpers::{CHATML_TOKENS, MERGES, SPECIAL_BASE, chatml_model, conversation};

#[test]
fn special_tokens_encode_as_single_ids() {
    let directory = chatml_model("special");
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let [end_of_text, start, end] = CHATML_TOKENS.map(|token| tokenizer.token_id(token).unwrap());
    assert_eq!(
        [end_of_text, start, end],
        [SPECIAL_BASE, SPECIAL_BASE + 1, SPECIAL_BASE + 2]
    );
    assert_eq!(tokenizer.token_id("<|im_middle|>"), None);

    let ids = tokenizer
        .encode_without_special_tokens("<|im_start|>user\nhello the user<|im_end|>\n")
        .unwrap();
    let mut expected = vec![start];
    expected.extend(
        tokenizer
            .encode_without_special_tokens("user\nhello the user")
            .unwrap(),
    );
    expected.push(end);
    expected.extend(tokenizer.encode_without_special_tokens("\n").unwrap());
    assert_eq!(ids, expected);
    // The merges applied (`user`, `hello`, ` the` are single tokens; ` user`
    // is a space and `user`), and no special token was spelled out in bytes
    // (`<` is byte 0x3C).
    let byte_ids = tokenizer
        .encode_without_special_tokens("user\nhello the user")
        .unwrap();
    assert_eq!(byte_ids.len(), 6, "{byte_ids:?}");
    assert!(!ids.contains(&u32::from(b'<')), "{ids:?}");

    // A whole rendered chat: one id per special token written in it.
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    let text = template.render(&conversation(), GenerationPrompt::Add).unwrap();
    let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
    assert_eq!(
        ids.iter().filter(|&&id| id == start).count(),
        text.matches("<|im_start|>").count()
    );
    assert_eq!(
        ids.iter().filter(|&&id| id == end).count(),
        text.matches("<|im_end|>").count()
    );
    // Streaming the ids back gives the text with special tokens skipped.
    let mut stream = TextStream::new(&tokenizer);
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&stream.push(id).unwrap());
    }
    streamed.push_str(&stream.finish().unwrap());
    assert_eq!(
        streamed,
        text.replace("<|im_start|>", "").replace("<|im_end|>", "")
    );
    std::fs::remove_dir_all(directory).unwrap();
}

/// Random text over ASCII, whitespace, and 2-, 3- and 4-byte characters,
/// some of which the merges split mid-character.
fn random_text(random: &mut SplitMix64) -> String {
    const PIECES: &[&str] = &[
        "a", "e", "h", "l", "o", "t", "u", "s", "r", "z", "Q", "7", " ", " ", "\n", "\t", "!", ",", "<", "|",
        "é", "ß", "Ж", "中", "文", "字", "ア", "😀", "😃", "🚀", "👍🏽", "e\u{301}", "hello", " the", "user",
        "\u{80}",
    ];
    let length = 1 + random.below(40) as usize;
    (0..length)
        .map(|_| PIECES[random.below(PIECES.len() as u64) as usize])
        .collect()
}

#[test]
fn streaming_decode_round_trips_random_text() {
    let directory = chatml_model("stream");
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let mut random = SplitMix64::new(2024);
    let mut held_back = 0;
    let mut merged_tokens = 0;
    for _ in 0..300 {
        let text = random_text(&mut random);
        let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
        merged_tokens += ids
            .iter()
            .filter(|&&id| (256..SPECIAL_BASE).contains(&id))
            .count();
        let mut stream = TextStream::new(&tokenizer);
        let mut streamed = String::new();
        for &id in &ids {
            let chunk = stream.push(id).unwrap();
            assert!(!chunk.contains('\u{FFFD}'), "chunk {chunk:?} of {text:?}");
            held_back += usize::from(chunk.is_empty());
            streamed.push_str(&chunk);
        }
        let rest = stream.finish().unwrap();
        assert!(!rest.contains('\u{FFFD}'));
        streamed.push_str(&rest);
        assert_eq!(streamed, text, "ids {ids:?}");
        assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    }
    // The test meant something: characters were split across tokens, and merges applied.
    assert!(held_back > 100, "{held_back}");
    assert!(merged_tokens > 100, "{merged_tokens}");
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn a_dangling_partial_character_comes_out_at_finish() {
    let directory = chatml_model("dangling");
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let mut stream = TextStream::new(&tokenizer);
    assert_eq!(stream.push(u32::from(b'a')).unwrap(), "a");
    // 0xF0 0x9F 0x98 is three bytes of a four-byte emoji: held back.
    let merge = MERGES
        .iter()
        .position(|(left, right)| [*left, *right].concat() == b"\xf0\x9f\x98");
    let partial = 256 + merge.unwrap() as u32;
    assert_eq!(stream.push(partial).unwrap(), "");
    assert_eq!(stream.finish().unwrap(), "\u{FFFD}");
    // The stream starts afresh.
    assert_eq!(stream.push(u32::from(b'b')).unwrap(), "b");
    assert_eq!(stream.finish().unwrap(), "");
    std::fs::remove_dir_all(directory).unwrap();
}
