# Datasets → prepared parquet files (`pacs prepare-data`); tiny models (trained or released, each with its own
# seed) are built from the toy task.


rule prepare_dataset:
    input:
        lambda w: prepare_inputs(w.dataset),
    output:
        f"{RESULTS}/data/{{dataset}}.parquet",
    log:
        f"{LOGS}/prepare_dataset/{{dataset}}.log",
    conda:
        ENV
    resources:
        **resources("prepare"),
    params:
        args=lambda w: prepare_args(w.dataset),
    shell:
        "pacs prepare-data --dataset {wildcards.dataset} {params.args} --out {output} > {log} 2>&1"


rule build_tiny_model:
    input:
        train=data_file("toy_train"),
        heldout=data_file("toy_heldout"),
    output:
        directory(f"{RESULTS}/models/{{model}}"),
    log:
        f"{LOGS}/build_tiny_model/{{model}}.log",
    conda:
        ENV
    resources:
        **resources("prepare"),
    params:
        options=lambda w: tiny_model_options(w.model),
    shell:
        "pacs tiny-model --train {input.train} --heldout {input.heldout} {params.options} --out {output} > {log} 2>&1"
