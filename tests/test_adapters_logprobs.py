"""Every family's trainer-side logprobs: equal to what ``generate`` sampled from, batch-invariant, differentiable.

The reference is independent of the adapter's collation: ``generate(output_scores=True)`` runs the model
incrementally on a left-padded batch with a KV cache, while ``completion_logprobs`` runs one right-padded forward
over prompt + completion. Equality (≤ 1e-4, fp32) at every step therefore checks positions (M-RoPE), image
fields, masks and temperature scaling at once.
"""

from __future__ import annotations

import pytest
import torch
from adapter_families import FAMILIES, family_adapter
from PIL import Image

from corl_vl.data.problem import Problem

# The first parameter image pixels flow through: a non-zero gradient here means the whole tower got gradients.
FIRST_PARAM = {
    "tiny-qwen2.5-vl": "model.visual.patch_embed.proj.weight",
    "tiny-internvl3.5": "model.vision_tower.embeddings.patch_embeddings.projection.weight",
    "tiny-gemma3": "model.vision_tower.embeddings.patch_embedding.weight",
    "tiny-qwen3-vl": "model.visual.patch_embed.proj.weight",
}
TOL = 1e-4
NEW_TOKENS = 6


def _image(seed: int, size: tuple[int, int]) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(
        torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy()
    )


def _problems(with_images: bool) -> list[Problem]:
    """Mixed image sizes (landscape, portrait, tiny), a text-only row, and different question lengths."""
    imgs = (
        [[_image(1, (120, 80))], [_image(2, (56, 100))], [_image(3, (30, 30))], []]
        if with_images
        else [[]] * 4
    )
    questions = [
        "What is the area of the shaded region?",
        "Find x.",
        "Which option is larger?",
        "Compute 7*6.",
    ]
    choices = [None, None, ["the left one", "the right one"], None]
    return [
        Problem(f"p{i}", q, images=im, choices=c)
        for i, (q, im, c) in enumerate(zip(questions, imgs, choices))
    ]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    adapter = family_adapter(request.param)
    model = adapter.load_model()
    prompts = [adapter.encode_prompt(p) for p in _problems(adapter.supports_images)]
    return request.param, adapter, model, prompts


def _reference_inputs(adapter, problem: Problem) -> dict:
    """The prompt through Hugging Face's own path (``apply_chat_template(tokenize=True)``), not the adapter's."""
    images = [adapter.prepare_image(im) for im in problem.images]
    messages = adapter.build_messages(problem, images)
    extra = adapter.processor_kwargs() if images else {}
    return adapter.processor.apply_chat_template(
        messages,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        **adapter.template_variables(),  # the same pinned date (Llama-3's template reads the clock)
        **({"processor_kwargs": extra} if extra else {}),
    )


def _reference(adapter, model, problems, *, sample: bool, temperature: float):
    """Per problem, unpadded: generate from HF's inputs; completions cut after a stop token; reference
    logprobs/entropies from ``scores`` (the processed logits generate sampled from)."""
    kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if sample else {}
    completions, ref_lp, ref_ent, ref_sc = [], [], [], []
    for i, problem in enumerate(problems):
        inputs = _reference_inputs(adapter, problem)
        torch.manual_seed(i)
        with torch.no_grad():
            out = model.generate(
                **inputs,
                max_new_tokens=NEW_TOKENS,
                output_scores=True,
                return_dict_in_generate=True,
                eos_token_id=adapter.stop_token_ids,
                pad_token_id=adapter.pad_token_id,
                **kwargs,
            )
        tokens = []
        for token in out.sequences[0, inputs["input_ids"].shape[1] :].tolist():
            tokens.append(token)
            if token in adapter.stop_token_ids:
                break
        logp = torch.stack([torch.log_softmax(out.scores[t][0].double(), -1) for t in range(len(tokens))])
        completions.append(tokens)
        ref_lp.append(logp[torch.arange(len(tokens)), torch.tensor(tokens)])
        ref_ent.append(-(logp.exp() * logp).sum(-1))
        # Intuitor's self-certainty straight from the definition: logsumexp(z) - mean_v z of the processed logits
        z = torch.stack([out.scores[t][0].double() for t in range(len(tokens))])
        ref_sc.append(z.logsumexp(-1) - z.mean(-1))
    return completions, ref_lp, ref_ent, ref_sc


@pytest.mark.parametrize(
    ("sample", "temperature"), [(False, 1.0), (True, 0.7)], ids=["greedy", "sampled-T0.7"]
)
def test_logprobs_match_generate_scores(family, sample, temperature):
    _, adapter, model, prompts = family
    problems = _problems(adapter.supports_images)
    completions, ref_lp, ref_ent, ref_sc = _reference(
        adapter, model, problems, sample=sample, temperature=temperature
    )
    with torch.no_grad():  # the whole mixed batch at once, right-padded by the adapter
        out = adapter.completion_logprobs(
            model, prompts, completions, temperature=temperature, micro_batch_size=8, with_entropy=True
        )
    assert out.logprobs.shape == out.mask.shape == (len(prompts), max(len(c) for c in completions))
    for i, tokens in enumerate(completions):
        n = len(tokens)
        assert out.mask[i].tolist() == [True] * n + [False] * (out.mask.shape[1] - n)
        assert torch.allclose(out.logprobs[i, :n].double(), ref_lp[i], atol=TOL, rtol=0), (
            i,
            out.logprobs[i],
            ref_lp[i],
        )
        assert torch.allclose(out.entropy[i, :n].double(), ref_ent[i], atol=TOL, rtol=0)
        assert torch.allclose(out.self_certainty[i, :n].double(), ref_sc[i], atol=TOL, rtol=0)
        assert torch.all(out.logprobs[i, n:] == 0) and torch.all(out.entropy[i, n:] == 0)
        assert torch.all(out.self_certainty[i, n:] == 0)
    if sample:  # the temperature really changes the result (else the sampled case proves nothing)
        with torch.no_grad():
            untempered = adapter.completion_logprobs(model, prompts, completions, temperature=1.0)
        assert (untempered.logprobs - out.logprobs).abs().max() > 1e-2


def test_generation_batch_matches_unpadded_generate(family):
    """The adapter's left-padded ``generate`` inputs give every row the scores it gets alone."""
    _, adapter, model, prompts = family
    problems = _problems(adapter.supports_images)
    completions, ref_lp, _, _ = _reference(adapter, model, problems, sample=False, temperature=1.0)
    batch = adapter.generation_batch(prompts)
    assert (batch["attention_mask"][:, -1] == 1).all()  # left padding: every row ends at the last column
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=NEW_TOKENS,
            output_scores=True,
            return_dict_in_generate=True,
            eos_token_id=adapter.stop_token_ids,
            pad_token_id=adapter.pad_token_id,
        )
    width = batch["input_ids"].shape[1]
    for i, tokens in enumerate(completions):
        assert out.sequences[i, width : width + len(tokens)].tolist() == tokens, i
        logp = torch.stack(
            [torch.log_softmax(out.scores[t][i].double(), -1)[tok] for t, tok in enumerate(tokens)]
        )
        assert torch.allclose(logp, ref_lp[i], atol=TOL, rtol=0), i


def test_batch_equals_items_one_by_one(family):
    name, adapter, model, prompts = family
    if adapter.supports_images and name == "tiny-qwen2.5-vl":  # the sizes really are mixed
        grids = {tuple(p.mm_inputs["image_grid_thw"][0].tolist()) for p in prompts if p.mm_inputs}
        assert len(grids) == 3
    g = torch.Generator().manual_seed(5)
    vocab = len(adapter.tokenizer)
    completions = [torch.randint(10, vocab, (n,), generator=g).tolist() for n in (5, 1, 7, 3)]
    assert len({len(p) for p in prompts}) > 1  # prompt padding is exercised too
    with torch.no_grad():
        batched = adapter.completion_logprobs(model, prompts, completions, micro_batch_size=8)
        chunked = adapter.completion_logprobs(model, prompts, completions, micro_batch_size=3)
        singles = [adapter.completion_logprobs(model, [p], [c]) for p, c in zip(prompts, completions)]
    for i, (single, tokens) in enumerate(zip(singles, completions)):
        n = len(tokens)
        assert torch.allclose(batched.logprobs[i, :n], single.logprobs[0, :n], atol=TOL, rtol=0), i
        assert torch.allclose(chunked.logprobs[i], batched.logprobs[i], atol=TOL, rtol=0), i
    assert torch.equal(batched.mask, chunked.mask)


def test_gradients_reach_the_vision_tower(family):
    name, adapter, model, prompts = family
    model.zero_grad(set_to_none=True)
    completions = [[11, 12, 13], [14, 15], [16], [17, 18]]
    out = adapter.completion_logprobs(model, prompts, completions, micro_batch_size=2)
    assert out.logprobs.requires_grad
    (-(out.logprobs * out.mask).sum()).backward()
    params = dict(model.named_parameters())
    vision = adapter.vision_parameter_names(model)
    # a plugin's first vision parameter is where its pixels enter (module order); text models: the embeddings
    first = FIRST_PARAM.get(name) or (vision[0] if vision else next(n for n in params if "embed_tokens" in n))
    assert bool(vision) == adapter.supports_images and (first in vision) == adapter.supports_images
    grad = params[first].grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, first
    model.zero_grad(set_to_none=True)


def test_sampled_image_placeholder_does_not_break_the_forward(family):
    """A random policy can sample the image placeholder; scoring it must not crash or shift other tokens."""
    _, adapter, model, prompts = family
    if not adapter.supports_images:
        assert adapter.placeholder_token_ids == []
        return
    (placeholder,) = adapter.placeholder_token_ids
    assert adapter.tokenizer.convert_ids_to_tokens(placeholder) == adapter.image_token
    with torch.no_grad():
        full = adapter.completion_logprobs(model, prompts[:2], [[11, placeholder, 12], [13]])
        prefix = adapter.completion_logprobs(model, prompts[:2], [[11, placeholder], [13]])
    assert torch.isfinite(full.logprobs).all()
    # the placeholder's own logprob only depends on what precedes it: equal with or without a continuation
    assert torch.allclose(full.logprobs[:, :2], prefix.logprobs, atol=TOL, rtol=0)
