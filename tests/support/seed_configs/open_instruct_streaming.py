# The usage example of Open Instruct's StreamingDataLoaderConfig, as the seed document
# "Implementation: Allenai Open instruct StreamingDataLoaderConfig" gives it.
from open_instruct.data_loader import StreamingDataLoaderConfig

config = StreamingDataLoaderConfig(
    num_unique_prompts_rollout=32,
    num_samples_per_prompt_rollout=8,
    response_length=1024,
    temperature=0.8,
    pack_length=2048,
    max_prompt_token_length=512,
    async_steps=2,
    dataset_mixer_list=["ai2-adapt-dev/rlvr_gsm8k_zs", "0.5",
                        "ai2-adapt-dev/rlvr_math_zs", "0.5"],
    filter_zero_std_samples=True,
    apply_verifiable_reward=True,
    verification_reward=10.0,
)
# Total completions per step: 32 * 8 = 256
