# v2's Table 3 and Figure 5b: the diversity of each method's correct answers (pacs diversity), from the responses
# its evaluations stored: one measurement per trained model and diversity.benchmarks benchmark, over the base model
# and every run at its last evaluated step. The tiny experiment embeds with a tiny embedding model built here.


rule build_tiny_embedder:
    output:
        directory(f"{RESULTS}/embedder/tiny"),
    log:
        f"{LOGS}/build_tiny_embedder.log",
    conda:
        ENV
    resources:
        **resources("prepare"),
    shell:
        "pacs tiny-embedder --out {output} > {log} 2>&1"


rule measure_diversity:
    input:
        diversity_inputs,
    output:
        diversity=f"{RESULTS}/diversity/{{model}}/{{benchmark}}.json",
        embeddings=f"{RESULTS}/diversity/{{model}}/{{benchmark}}.npz",
    log:
        f"{LOGS}/measure_diversity/{{model}}/{{benchmark}}.log",
    conda:
        ENV
    resources:
        **resources("diversity"),
    params:
        args=diversity_args,
    shell:
        "pacs diversity {params.args} --out {output.diversity} --embeddings {output.embeddings} > {log} 2>&1"
