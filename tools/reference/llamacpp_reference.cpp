// llama.cpp's own answers for kscope's GGUF tests: the token ids of strings
// and the logits of a token sequence, computed by libllama on a GGUF file.
// Built against a llama.cpp build (see tools/reference/gguf_reference.sh):
//
//   llamacpp_reference tokenize MODEL.gguf STRINGS.hex   one hex-encoded string per line;
//                                                        prints the ids of each on a line
//                                                        (special tokens added and parsed)
//   llamacpp_reference logits MODEL.gguf 1,2,3 OUT.f32   the logits of every position,
//                                                        [positions, vocab] little-endian f32
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

static std::string from_hex(const std::string & hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        bytes.push_back((char) strtol(hex.substr(i, 2).c_str(), nullptr, 16));
    }
    return bytes;
}

static llama_model * load(const char * path) {
    llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(path, params);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", path);
        exit(1);
    }
    return model;
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s tokenize MODEL STRINGS.hex | logits MODEL IDS OUT.f32\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = load(argv[2]);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::string mode = argv[1];
    if (mode == "tokenize") {
        std::ifstream lines(argv[3]);
        std::string line;
        while (std::getline(lines, line)) {
            const std::string text = from_hex(line);
            std::vector<llama_token> ids(text.size() + 16);
            int count = llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), (int) ids.size(), true, true);
            if (count < 0) {
                ids.resize(-count);
                count = llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), (int) ids.size(), true, true);
            }
            for (int i = 0; i < count; i++) {
                printf(i ? " %d" : "%d", ids[i]);
            }
            printf("\n");
        }
    } else if (mode == "logits" && argc == 5) {
        std::vector<llama_token> ids;
        std::stringstream list(argv[3]);
        std::string item;
        while (std::getline(list, item, ',')) {
            ids.push_back(atoi(item.c_str()));
        }
        llama_context_params params = llama_context_default_params();
        params.n_ctx = ids.size() < 64 ? 64 : ids.size();
        params.n_batch = params.n_ctx;
        params.n_ubatch = params.n_ctx;
        params.n_threads = 2;
        params.n_threads_batch = 2;
        llama_context * context = llama_init_from_model(model, params);
        llama_batch batch = llama_batch_init((int) ids.size(), 0, 1);
        for (size_t i = 0; i < ids.size(); i++) {
            batch.token[i] = ids[i];
            batch.pos[i] = (llama_pos) i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        batch.n_tokens = (int) ids.size();
        if (llama_decode(context, batch) != 0) {
            fprintf(stderr, "llama_decode failed\n");
            return 1;
        }
        const int n_vocab = llama_vocab_n_tokens(vocab);
        FILE * out = fopen(argv[4], "wb");
        for (size_t i = 0; i < ids.size(); i++) {
            fwrite(llama_get_logits_ith(context, (int) i), sizeof(float), n_vocab, out);
        }
        fclose(out);
        llama_batch_free(batch);
        llama_free(context);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    llama_model_free(model);
    return 0;
}
