//! Template errors: one line naming the file and template line, and runaway templates stopped.

use kernelscope_model::{ChatMessage, ChatTemplate, GenerationPrompt};

use crate::helpers::{chatml_model, conversation, jinja_template, template_error};

#[test]
fn template_errors_name_the_file_and_line() {
    let message = template_error(
        jinja_template("syntax", "{% for m in messages %}\n{{ m.content }\n"),
        "chat_template.jinja",
    );
    assert!(message.contains("syntax error"), "{message}");
    assert!(message.contains("template line 2"), "{message}");

    let message = template_error(
        jinja_template("unclosed", "{% for m in messages %}{{ m.content }}"),
        "chat_template.jinja",
    );
    assert!(message.contains("syntax error"), "{message}");

    // raise_exception and the unknown-role check of the ChatML template.
    let directory = chatml_model("raise");
    let template = ChatTemplate::from_directory(&directory).unwrap().unwrap();
    let messages = [ChatMessage::new("user", "hi"), ChatMessage::new("tool", "42")];
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "tokenizer_config.json",
    );
    assert!(
        message.contains("the template raised an exception: Unknown role: tool"),
        "{message}"
    );
    assert!(message.contains("template line 8"), "{message}");

    let raising = jinja_template(
        "raising",
        "a\n{{ raise_exception('Conversation roles must alternate\\nuser/assistant') }}",
    )
    .unwrap()
    .unwrap();
    let message = template_error(
        raising.render(&messages, GenerationPrompt::Omit),
        "chat_template.jinja",
    );
    assert!(
        message.contains("Conversation roles must alternate user/assistant (template line 2)"),
        "{message}"
    );

    // Unknown functions and methods are errors, not silent blanks.
    let unknown = jinja_template("unknown", "{{ messages[0].content.frobnicate() }}")
        .unwrap()
        .unwrap();
    template_error(
        unknown.render(&messages, GenerationPrompt::Omit),
        "chat_template.jinja",
    );
    let unsupported = jinja_template("strftime", "{{ strftime_now('%Y %Q') }}")
        .unwrap()
        .unwrap();
    let message = template_error(
        unsupported.render(&messages, GenerationPrompt::Omit),
        "chat_template.jinja",
    );
    assert!(message.contains("%Q is not supported"), "{message}");
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn runaway_templates_are_stopped() {
    let messages = conversation();
    let looping = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    let template = jinja_template("fuel", looping).unwrap().unwrap();
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "chat_template.jinja",
    );
    assert!(message.contains("ran out of fuel"), "{message}");

    let flooding = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}";
    let template = jinja_template("output", flooding).unwrap().unwrap();
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "chat_template.jinja",
    );
    assert!(message.contains("the rendered prompt exceeds"), "{message}");

    let recursing = "{% macro deeper(n) %}{{ deeper(n + 1) }}{% endmacro %}{{ deeper(0) }}";
    let template = jinja_template("recursion", recursing).unwrap().unwrap();
    let message = template_error(
        template.render(&messages, GenerationPrompt::Add),
        "chat_template.jinja",
    );
    assert!(message.contains("recursion"), "{message}");
}
