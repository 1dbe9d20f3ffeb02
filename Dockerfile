# The image docs/managed/ runs (a Kubeflow TFJob, Vertex AI worker pools):
# this repository at /app, where the manifests' `python
# cifar10_distributed_train.py` runs, with requirements.txt installed and no
# data (.dockerignore keeps cifar10/ out; each task finds or downloads
# --data_dir). Build and push it as docs/distributed.md says.
FROM python:3.11-slim
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# Pod logs then show each line when it is printed.
ENV PYTHONUNBUFFERED=1
