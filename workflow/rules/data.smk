# Datasets → prepared parquet files (`pacs prepare-data`); tiny models (trained or released, each with its own
# seed) are built from the toy task.


rule prepare_dataset:
    input:
        lambda w: prepare_inputs(w.dataset),
    output:
        f"{RESULTS}/data/{{dataset}}.parquet",
    params:
        args=lambda w: prepare_args(w.dataset),
    log:
        f"{LOGS}/prepare_dataset/{{dataset}}.log",
    resources:
        **resources("prepare"),
    conda:
        ENV
    shell:
        "pacs prepare-data --dataset {wildcards.dataset} {params.args} --out {output} > {log} 2>&1"


rule build_tiny_model:
    input:
        train=data_file("toy_train"),
        heldout=data_file("toy_heldout"),
    output:
        directory(f"{RESULTS}/models/{{model}}"),
    params:
        options=lambda w: tiny_model_options(w.model),
    log:
        f"{LOGS}/build_tiny_model/{{model}}.log",
    resources:
        **resources("prepare"),
    conda:
        ENV
    shell:
        "pacs tiny-model --train {input.train} --heldout {input.heldout} {params.options} --out {output} > {log} 2>&1"
