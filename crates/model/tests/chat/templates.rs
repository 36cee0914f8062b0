//! Rendering chat templates exactly, Python string methods, and which template a directory uses.

use kernelscope_model::{ChatMessage, ChatTemplate, GenerationPrompt, Tokenizer};
use serde_json::json;

use crate::helpers::{
    LLAMA3_TEMPLATE, LLAMA3_TOKENS, SPECIAL_BASE, chatml_model, conversation, jinja_template,
    model_directory, template_error, write_tokenizer,
};

#[test]
fn chatml_conversation_renders_exactly() {
    let directory = chatml_model("chatml");
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert!(template.path().ends_with("tokenizer_config.json"));
    assert_eq!(template.bos_token(), None);
    assert_eq!(template.eos_token(), Some("<|im_end|>"));

    let turns = "<|im_start|>system\nYou are terse.<|im_end|>\n\
                 <|im_start|>user\nHi there<|im_end|>\n\
                 <|im_start|>assistant\nHello! 😀<|im_end|>\n\
                 <|im_start|>user\nWhat is 中文?<|im_end|>\n";
    assert_eq!(
        template.render(&conversation(), GenerationPrompt::Omit).unwrap(),
        turns
    );
    assert_eq!(
        template.render(&conversation(), GenerationPrompt::Add).unwrap(),
        format!("{turns}<|im_start|>assistant\n")
    );
    // Without a system message the template supplies its own.
    assert_eq!(
        template
            .render(&conversation()[1..2], GenerationPrompt::Add)
            .unwrap(),
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn llama3_template_gets_bos_and_todays_date() {
    let directory = model_directory("llama3");
    write_tokenizer(&directory, &LLAMA3_TOKENS, Some("<|begin_of_text|>"));
    // bos_token as an AddedToken object, as older tokenizer_config.json files have it.
    let config = json!({"bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>", "lstrip": false},
                        "eos_token": "<|eot_id|>"});
    std::fs::write(directory.join("tokenizer_config.json"), config.to_string()).unwrap();
    std::fs::write(directory.join("chat_template.jinja"), LLAMA3_TEMPLATE).unwrap();
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert_eq!(template.bos_token(), Some("<|begin_of_text|>"));

    let text = template.render(&conversation(), GenerationPrompt::Add).unwrap();
    // The date is today's: check its shape, then compare the rest exactly.
    let marker = "Today Date: ";
    let start = text.find(marker).unwrap() + marker.len();
    let date = &text[start..start + 11];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    assert!(date[..2].bytes().all(|byte| byte.is_ascii_digit()), "{date}");
    assert!(months.contains(&&date[3..6]), "{date}");
    assert!(date[7..].parse::<u32>().unwrap() >= 2025, "{date}");
    assert_eq!(
        text.replace(date, "DD Mon YYYY"),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
         Today Date: DD Mon YYYY\n\nYou are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello! 😀<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nWhat is 中文?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );

    // The rendered text carries BOS already: encode it without adding another.
    let tokenizer = Tokenizer::from_directory(&directory).unwrap().unwrap();
    let bos = tokenizer.token_id("<|begin_of_text|>").unwrap();
    assert_eq!(bos, SPECIAL_BASE);
    let ids = tokenizer.encode_without_special_tokens(&text).unwrap();
    assert_eq!(ids.iter().filter(|&&id| id == bos).count(), 1);
    assert_eq!(ids[0], bos);
    let doubled = tokenizer.encode(&text).unwrap();
    assert_eq!(
        &doubled[..2],
        &[bos, bos],
        "encode() adds the post-processor's BOS"
    );
    assert_eq!(&doubled[1..], &ids[..]);
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn templates_get_python_string_methods_and_json() {
    let source = "{{ messages[0].content.split(',') | join('|') }} {{ messages[0].content.startswith('a') }} \
                  {{ messages[0].content.upper() }} {{ messages[0] | tojson }}\n{{ messages[0] | tojson(indent=2) }}\n\
                  {{ tools is none }} {{ documents is defined }}";
    let template = jinja_template("pycompat", source).unwrap().unwrap();
    let text = template
        .render(&[ChatMessage::new("user", "a,<b>,é")], GenerationPrompt::Omit)
        .unwrap();
    assert_eq!(
        text,
        "a|<b>|é True A,<B>,É {\"role\": \"user\", \"content\": \"a,<b>,é\"}\n\
         {\n  \"role\": \"user\",\n  \"content\": \"a,<b>,é\"\n}\nTrue True"
    );
}

#[test]
fn chat_template_jinja_takes_precedence_over_tokenizer_config() {
    let directory = chatml_model("precedence");
    std::fs::write(
        directory.join("chat_template.jinja"),
        "JINJA {{ eos_token }} {{ messages[0].content }}",
    )
    .unwrap();
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert!(template.path().ends_with("chat_template.jinja"));
    assert_eq!(
        template
            .render(&conversation()[1..2], GenerationPrompt::Omit)
            .unwrap(),
        "JINJA <|im_end|> Hi there"
    );
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn named_templates_use_the_default_one() {
    let directory = model_directory("named");
    let write = |templates: serde_json::Value| {
        let config = json!({"bos_token": "<s>", "chat_template": templates});
        std::fs::write(directory.join("tokenizer_config.json"), config.to_string()).unwrap();
    };
    write(
        json!([{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT {{ bos_token }}"}]),
    );
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    assert_eq!(
        template.render(&conversation(), GenerationPrompt::Add).unwrap(),
        "DEFAULT <s>"
    );

    write(json!([{"name": "tool_use", "template": "TOOLS"}, {"name": "rag", "template": "RAG"}]));
    let message = template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    assert!(
        message.contains("no template named `default` (there are: tool_use, rag)"),
        "{message}"
    );
    write(json!([{"name": "default"}]));
    template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    write(json!(42));
    template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    write(json!("{% if %}"));
    let message = template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    assert!(message.contains("syntax error"), "{message}");

    // No template anywhere: none, not an error.
    write(serde_json::Value::Null);
    assert!(ChatTemplate::from_directory(&directory).unwrap().is_none());
    std::fs::remove_file(directory.join("tokenizer_config.json")).unwrap();
    assert!(ChatTemplate::from_directory(&directory).unwrap().is_none());
    // A tokenizer_config.json that is not JSON is an error.
    std::fs::write(directory.join("tokenizer_config.json"), "{\"chat_template\": ").unwrap();
    let message = template_error(ChatTemplate::from_directory(&directory), "tokenizer_config.json");
    assert!(message.contains("not valid JSON"), "{message}");
    std::fs::remove_dir_all(directory).unwrap();
}
