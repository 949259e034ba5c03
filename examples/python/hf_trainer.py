"""Plan a LoRA fine-tune with oomless, then hand the plan to the Hugging Face Trainer.

Run where transformers and peft are installed:  PYTHONPATH=bindings/python python3 hf_trainer.py
"""
import oomless
import oomless.hf


def main():
    plan = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048,
                        target_effective_batch=32)  # the detected GPU, or --gpu's default
    print("micro-batch %(batch_size)d x accumulation %(grad_accum)d" % plan["plan"])

    import transformers  # imported late: oomless itself needs no PyTorch

    args = transformers.TrainingArguments(output_dir="out",
                                          **oomless.hf.training_arguments(plan))
    print(args.per_device_train_batch_size, args.gradient_accumulation_steps, args.bf16)


if __name__ == "__main__":
    main()
